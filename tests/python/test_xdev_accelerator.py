"""torch's device-generic APIs on xdev: torch.accelerator, torch.Stream, torch.Event."""
import torch

import xdev_util  # noqa: F401


def test_current_accelerator_is_xdev():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("xdev")
    assert torch.accelerator.device_count() == torch.xdev.device_count() == 8


def test_device_index_api():
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(3)
    try:
        assert torch.xdev.current_device() == 3
        assert torch.ones(1, device="xdev").device.index == 3
    finally:
        torch.accelerator.set_device_index(0)
    with torch.accelerator.device_index(2):
        assert torch.xdev.current_device() == 2
    assert torch.xdev.current_device() == 0


def test_generic_stream_and_event():
    s = torch.Stream(device="xdev:1")
    assert s.device == torch.device("xdev:1")
    e = torch.Event(device="xdev:1", enable_timing=True)
    x = torch.zeros(10, device="xdev:1")
    torch.accelerator.synchronize(1)
    prev = torch.accelerator.current_stream(1)
    torch.accelerator.set_stream(s)  # makes xdev:1 current as well
    try:
        assert torch.accelerator.current_stream(1) == s
        torch.xdev._sleep(500)
        x.fill_(1.0)
        e.record(s)
    finally:
        torch.accelerator.set_stream(prev)
        torch.accelerator.set_device_index(0)
    assert not e.query()
    e.synchronize()
    assert e.query() and x.sum().item() == 10


def test_accelerator_synchronize_and_memory():
    x = torch.empty(1 << 20, dtype=torch.uint8, device="xdev:4")
    assert torch.accelerator.memory_allocated(4) >= 1 << 20
    torch.accelerator.synchronize()
    del x
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved(4) == torch.accelerator.memory_allocated(4)


def test_tensor_to_by_accelerator_name():
    dev = torch.accelerator.current_accelerator()
    y = torch.arange(3).to(dev)
    assert y.device == torch.device("xdev:0") and y.sum().item() == 3
