"""Timing (TORCH_XCCL_ENABLE_TIMING: work._get_duration()), the NaN check
(TORCH_XCCL_NAN_CHECK) and non-blocking creation (TORCH_XCCL_USE_COMM_NONBLOCKING):
docs/PLUGIN.md."""
import pytest

import workers_observability as w
from harness import free_port, run_world


@pytest.fixture
def env(monkeypatch):
    def set_(**kv):
        for k, v in kv.items():
            monkeypatch.setenv(k, v)
    return set_


@pytest.mark.timeout(120)
@pytest.mark.parametrize("device", ["cpu", "xdev"])
def test_get_duration_times_the_operation_not_the_queue_ahead(env, device):
    env(TORCH_XCCL_ENABLE_TIMING="1")
    kw = {"device_id": "xdev"} if device == "xdev" else {}
    r0, r1 = run_world(w.durations, 2, timeout=100, device=device, **kw)
    for r in (r0, r1):
        assert r["sum"] == 4.0, r
        assert 0 <= r["behind"] < 100, r  # queued behind the slow one, not charged its wait
        assert len(r["coalesced"]) >= 1 and all(0 <= d < 1000 for d in r["coalesced"]), r
    assert r0["slow"] >= 250, r0  # it waited 300 ms for rank 1 while it ran
    assert r1["slow"] < 250, r1


@pytest.mark.timeout(60)
def test_get_duration_without_timing_names_the_knob():
    r0, r1 = run_world(w.duration_without_timing, 2, timeout=50)
    assert "TORCH_XCCL_ENABLE_TIMING=1" in r0, r0
    assert r0 == r1


@pytest.mark.timeout(150)
@pytest.mark.parametrize("device", ["cpu", "xdev"])
def test_nan_check_raises_on_every_rank_naming_the_rank(env, device):
    env(TORCH_XCCL_NAN_CHECK="1")
    kw = {"device_id": "xdev"} if device == "xdev" else {}
    results = run_world(w.nan_check, 3, timeout=140, device=device, **kw)
    for rank, r in enumerate(results):
        assert "rank 1 of group" in r["allreduce"] and "fed a NaN" in r["allreduce"], r
        assert ("(this rank)" in r["allreduce"]) == (rank == 1), r
        assert "rank 2 of group" in r["bf16"], r
        if device == "cpu":
            assert "rank 0 of group" in r["fp8"], r
            assert "rank 2 of group" in r["fp8e4"], r
            assert "rank 1 of group" in r["f64"], r
            assert "rank 0 of group" in r["f16"], r
        assert r["broadcast_receiver_nan"] is None, r
        assert r["broadcast_value"] == [2.0] * 8, r
        assert "rank 0 of group" in r["broadcast_root_nan"], r
        assert "rank 2 of group" in r["all_gather"], r
        assert r["ints"] is None, r
        assert r["after"] == [3.0] * 4, r


@pytest.mark.timeout(60)
def test_without_nan_check_a_nan_is_reduced_silently():
    results = run_world(w.nan_unchecked, 2, timeout=50)
    assert results[0] == results[1] and results[0][0] == "nan", results


@pytest.mark.timeout(90)
def test_nonblocking_creation_lets_init_return_before_a_late_peer(env):
    env(TORCH_XCCL_USE_COMM_NONBLOCKING="1")
    r0, r1 = run_world(w.late_peer_init, 2, timeout=80, init=False, port=free_port(), late_s=1.5)
    assert r0["sum"] == r1["sum"] == [3.0] * 4, (r0, r1)
    assert r0["init_s"] < 1.0, r0  # returned without waiting for rank 1's 1.5 s delay


@pytest.mark.timeout(90)
def test_blocking_creation_waits_for_a_late_peer():
    """The comparison that makes the test above mean something: by default init waits."""
    r0, r1 = run_world(w.late_peer_init, 2, timeout=80, init=False, port=free_port(), late_s=1.5)
    assert r0["sum"] == [3.0] * 4, r0
    assert r0["init_s"] >= 1.0, r0


@pytest.mark.timeout(90)
def test_nonblocking_creation_that_fails_raises_at_the_first_operation(env):
    env(TORCH_XCCL_USE_COMM_NONBLOCKING="1")
    r0, _ = run_world(w.lonely_nonblocking_init, 2, timeout=80, init=False, port=free_port())
    assert r0["init_s"] < 1.0, r0
    assert r0["error"] and "xccl init (non-blocking)" in r0["error"], r0
    assert "rank 0 of 2" in r0["error"], r0
    assert r0["error_s"] < 30, r0  # the creation's deadline (3 s) plus slack, not a hang


@pytest.mark.timeout(120)
def test_profiler_shows_the_device_time_of_an_xdev_collective():
    r0, r1 = run_world(w.profiled, 2, timeout=100, device_id="xdev")
    for r in (r0, r1):
        assert r["sum"] == 4.0, r  # two all_reduces of ones
        assert r["cpu_ms"] < 100, r  # the host only queued it
    assert r0["device_ms"] >= 250, r0  # its stream waited for rank 1, 300 ms late
    assert r0["call_ms"] < 100, r0


@pytest.mark.timeout(120)
def test_kineto_traces_show_xdev_copies_and_the_collective_linked_to_their_ops():
    r0, r1 = run_world(w.kineto_traced, 2, timeout=100, device_id="xdev")
    for r in (r0, r1):
        assert r["sum"] == 2.0, r
        for key in ("Memcpy HtoD", "Memcpy DtoH", "xccl allreduce"):
            assert r[key] is not None and r[key][0] == "DeviceType.XDEV", r
        assert r["copy_op_ms"] > 0 and r["allreduce_op_ms"] > 0, r
        assert r["trace"] == [("Memcpy DtoH", "gpu_memcpy"), ("Memcpy HtoD", "gpu_memcpy"),
                              ("xccl allreduce", "kernel")], r
        assert r["cpu_only_device_events"] == 0, r
    # The first rank's stream waited at the collective until the other called it: rank 1,
    # 300 ms late after its sleep (the lateness measured, as a loaded machine stretches
    # either rank's way there; whichever came first shows the wait as device time).
    late_ms = (r1["call_at"] - r0["call_at"]) * 1e3
    assert abs(late_ms) > 100, (r0, r1)
    first = r0 if late_ms > 0 else r1
    assert first["xccl allreduce"][1] >= abs(late_ms) - 30, (late_ms, first)
