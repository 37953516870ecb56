"""ProcessGroupNCCL semantics on xdev, in real processes with hard timeouts. Each case is
built to FAIL when the property is missing: a late peer makes the collective slow, so a
read or a reused buffer that is not ordered behind it sees the wrong bytes."""
import pytest

import workers_xdev
from harness import run_world


@pytest.mark.timeout(120)
def test_wait_orders_the_current_stream_and_does_not_block_the_host():
    results = run_world(workers_xdev.wait_orders_current_stream, 2, timeout=100)
    r0 = results[0]
    assert r0["ok"], r0  # the read queued after wait() saw the reduced value
    assert not r0["done_after_wait"], r0  # wait() returned before the late peer arrived
    assert r0["waited"] < 0.5, r0
    for r in results:
        assert r["ok"] and r["future_ok"] and r["then_ok"], r


@pytest.mark.timeout(120)
def test_allocator_does_not_reuse_an_input_the_collective_still_reads():
    results = run_world(workers_xdev.allocator_waits_for_the_collective, 2, timeout=100)
    for r in results:
        assert r["ok"], r
        assert r["junk"] == [-1.0, -1.0], r
    # Rank 0's collective waits a second for rank 1, so its input must not be handed out
    # again; rank 1 arrives last, its collective may finish before it frees the input, and
    # then reusing the block is right.
    assert not results[0]["reused"], results[0]


@pytest.mark.timeout(120)
def test_blocking_wait_blocks_the_host(monkeypatch):
    monkeypatch.setenv("TORCH_XCCL_BLOCKING_WAIT", "1")
    results = run_world(workers_xdev.blocking_wait, 2, timeout=100)
    for r in results:
        assert r["done_after_wait"] and r["ok"], r


@pytest.mark.timeout(120)
def test_device_mismatch_is_a_clear_error():
    results = run_world(workers_xdev.device_errors, 2, timeout=100, device_id="xdev")
    for r in results:
        assert "bound to xdev:" in r["bound"] and "allreduce" in r["bound"], r
        assert "same device" in r["mixed"] or "one device" in r["mixed"], r
        # a subgroup inherits the bound device, so a second device is refused as unbound
        # groups refuse it: "one device per group"
        assert ("one device per group" in r["second_device"]
                or "bound to xdev:" in r["second_device"]), r
        assert r["after"] == [2.0] * 4, r


@pytest.mark.timeout(150)
@pytest.mark.parametrize("world", [2, 3])
def test_split_group_new_group_and_subgroups(world):
    results = run_world(workers_xdev.split_and_subgroups, world, timeout=130, device_id="xdev")
    for r in results:
        assert all(r.values()), r


@pytest.mark.timeout(120)
def test_a_failed_collective_raises_instead_of_hanging():
    results = run_world(workers_xdev.collective_failure, 2, timeout=100, pg_timeout_s=60,
                        allow_exit=[1])
    r = results[0]
    assert r["err"] is not None, r
    assert r["s"] < 30, r
