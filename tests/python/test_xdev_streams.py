"""Streams and events on xdev. The ordering tests fail if work is not ordered as CUDA orders it:
a slow op (a queued sleep) followed by a write on stream A is invisible to stream B unless B
waits for A."""
import pytest
import torch

import xdev_util  # noqa: F401

SLOW_MS = 500  # long enough that "not done yet" holds even on a loaded machine


def _slow_fill_on(stream, x, value):
    with torch.xdev.stream(stream):
        torch.xdev._sleep(SLOW_MS)
        x.fill_(value)  # queued behind the sleep


def test_stream_objects():
    s = torch.xdev.Stream()
    assert isinstance(s, torch.Stream) and s.device == torch.device("xdev:0")
    assert torch.xdev.current_stream() == torch.xdev.default_stream()
    assert torch.xdev.current_stream().stream_id == 0
    with torch.xdev.stream(s):
        assert torch.xdev.current_stream() == s
    assert torch.xdev.current_stream() == torch.xdev.default_stream()
    s1 = torch.xdev.Stream(device=1)
    assert s1.device == torch.device("xdev:1")
    with torch.xdev.stream(s1):  # switches the device too, and restores it
        assert torch.xdev.current_device() == 1
        assert torch.xdev.current_stream() == s1
    assert torch.xdev.current_device() == 0
    assert torch.xdev.Stream() != torch.xdev.Stream()  # the pool hands out distinct streams


def test_work_on_one_stream_is_ordered():
    x = torch.zeros(1000, device="xdev")
    torch.xdev._sleep(SLOW_MS)
    x.fill_(1.0)
    assert (x + 1).sum().item() == 2000  # the op waited for the queued fill


def test_other_stream_without_wait_does_not_see_the_write():
    a, b = torch.xdev.Stream(), torch.xdev.Stream()
    x = torch.zeros(1000, device="xdev")
    torch.xdev.synchronize()
    _slow_fill_on(a, x, 1.0)
    with torch.xdev.stream(b):
        seen = x.sum().item()
    assert seen == 0  # b ran ahead: the streams really are concurrent
    a.synchronize()
    assert x.sum().item() == 1000


def test_wait_stream_orders_the_read():
    a, b = torch.xdev.Stream(), torch.xdev.Stream()
    x = torch.zeros(1000, device="xdev")
    torch.xdev.synchronize()
    _slow_fill_on(a, x, 1.0)
    b.wait_stream(a)
    with torch.xdev.stream(b):
        assert x.sum().item() == 1000


def test_wait_event_orders_the_read_and_query_reports_progress():
    a, b = torch.xdev.Stream(), torch.xdev.Stream()
    x = torch.zeros(1000, device="xdev")
    torch.xdev.synchronize()
    _slow_fill_on(a, x, 3.0)
    ev = a.record_event()
    assert not ev.query() and not a.query()
    b.wait_event(ev)
    with torch.xdev.stream(b):
        assert x.sum().item() == 3000
    assert ev.query() and a.query()


def test_non_blocking_copies_are_queued_on_the_current_stream():
    a, b = torch.xdev.Stream(), torch.xdev.Stream()
    src = torch.full((1000,), 7.0, device="xdev")
    dst = torch.zeros(1000, device="xdev")
    torch.xdev.synchronize()
    with torch.xdev.stream(a):
        torch.xdev._sleep(SLOW_MS)
        dst.copy_(src, non_blocking=True)
    with torch.xdev.stream(b):
        assert dst.sum().item() == 0  # not yet copied
    b.wait_stream(a)
    with torch.xdev.stream(b):
        assert dst.sum().item() == 7000


def test_to_other_device_non_blocking_is_ordered_on_the_current_stream():
    x = torch.arange(10.0)
    torch.xdev._sleep(100)
    y = x.to("xdev:1", non_blocking=True)
    assert y.device == torch.device("xdev:1")
    assert torch.equal(y.cpu(), x)
    z = y.to("xdev:0")
    assert torch.equal(z.cpu(), x)
    pinned = torch.arange(5.0).pin_memory()
    with torch.xdev.device(1):
        w = pinned.to("xdev:1", non_blocking=True)
        torch.xdev.current_stream().synchronize()
    assert torch.equal(w.cpu(), torch.arange(5.0))


def test_event_timing_and_synchronize():
    start = torch.xdev.Event(enable_timing=True)
    end = torch.xdev.Event(enable_timing=True)
    start.record()
    torch.xdev._sleep(100)
    end.record()
    end.synchronize()
    assert end.query()
    assert 80 <= start.elapsed_time(end) < 5000


def test_device_synchronize_waits_for_every_stream():
    s = torch.xdev.Stream()
    x = torch.zeros(10, device="xdev")
    torch.xdev.synchronize()
    _slow_fill_on(s, x, 2.0)
    torch.xdev.synchronize()
    assert s.query()
    with torch.xdev.stream(torch.xdev.Stream()):
        assert x.sum().item() == 20


def test_event_from_another_device_is_a_clear_error():
    ev = torch.xdev.Event(device=0)
    ev.record(torch.xdev.Stream(device=0))
    with pytest.raises(RuntimeError, match="device"):
        ev.record(torch.xdev.Stream(device=1))


def test_stream_used_on_the_wrong_device_is_a_clear_error():
    x = torch.ones(4, device="xdev:0")
    with pytest.raises(RuntimeError, match="own device"):
        x.record_stream(torch.xdev.Stream(device=1))
    with pytest.raises(ValueError, match="xdev stream"):
        torch.xdev.set_stream(torch.Stream(device="cpu"))
    bogus = torch.Stream(stream_id=12345, device_index=0,
                         device_type=torch.xdev.Stream().device_type)
    with pytest.raises(RuntimeError, match="unknown stream id"):
        with torch.xdev.stream(bogus):
            pass
