"""Never a wrong answer: when a peer fails while collectives are in flight, no survivor reads
their outputs as results, on any path (docs/RELIABILITY.md, "A failure travels with the data").

Three ranks; the last one is killed, stopped, or leaves its group while the survivors have one
operation of each kind in flight (allreduce, broadcast, allgather, reduce-scatter, all-to-all),
then each output is read a different way: a synchronous call then .cpu(), wait() then .cpu(),
the future's value, an op on the output, device synchronize. Every read must raise
torch.distributed.DistBackendError naming the failed operation; none may return a value.
Before the fix, on xdev every one of them returned the unreduced input. The whole matrix
(transports, sizes, faults, DDP) runs in bench/fault_suite.py --scenario outputs; this is the
sample CI runs.
"""
from __future__ import annotations

import pytest

import workers_failures
from harness import run_world

HEARTBEAT = {"XCCL_HEARTBEAT_MS": "200", "XCCL_HEARTBEAT_TIMEOUT_MS": "1500"}


def check_survivors(results, world):
    assert results[world - 1] is None  # the victim
    for rank, out in enumerate(results[:-1]):
        assert out, f"rank {rank} observed nothing"
        recovered = out.pop("_after_recovery", None)
        for name, o in out.items():
            assert o["raised"], f"rank {rank}: {name} returned {o.get('value')!r} as a result"
            assert o["dist_error"], f"rank {rank}: {name} raised {o['type']}: {o['msg']}"
        if recovered is not None:
            assert recovered == 12.0, recovered
    return results


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how,shm,size", [
    ("kill", True, workers_failures.BIG),     # SHM, peer reads (single copy)
    ("kill", False, workers_failures.SMALL),  # TCP
    ("stop", True, workers_failures.SMALL),   # frozen: the heartbeat fails it
    ("leave", True, workers_failures.BIG),    # the peer destroys its group and lives on
])
def test_no_survivor_reads_a_failed_collectives_output_on_xdev(monkeypatch, how, shm, size):
    for k, v in HEARTBEAT.items():
        monkeypatch.setenv(k, v)
    if not shm:
        monkeypatch.setenv("XCCL_SHM_DISABLE", "1")
    results = run_world(workers_failures.in_flight, 3, timeout=100, allow_exit=(2,),
                        pg_timeout_s=30, how=how, device="xdev", size=size)
    out = check_survivors(results, 3)
    # The message names what failed: an xccl operation and the lost peer or the failure.
    msgs = " | ".join(o["msg"] for o in out[0].values())
    assert "xccl" in msgs and ("#" in msgs), msgs


@pytest.mark.timeout(120)
def test_cpu_tensors_raise_too():
    results = run_world(workers_failures.in_flight, 3, timeout=100, allow_exit=(2,),
                        pg_timeout_s=30, how="kill", device="cpu", size=workers_failures.SMALL)
    check_survivors(results, 3)


@pytest.mark.timeout(150)
def test_ddp_step_that_loses_a_peer_raises_before_any_parameter_changes():
    results = run_world(workers_failures.ddp_step_loses_a_peer, 3, timeout=130,
                        allow_exit=(2,), pg_timeout_s=30, how="kill")
    for rank, r in enumerate(results[:2]):
        assert r["raised"], f"rank {rank}: the step went through with local gradients"
        assert r["raised"]["dist_error"], r["raised"]
        assert not any(r["changed"]), f"rank {rank}: parameters changed: {r['changed']}"
    assert results[0]["sums_before"] == results[1]["sums_before"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("device", ["xdev", "cpu"])
def test_reproducible_reductions_raise_too(monkeypatch, device):
    """XCCL_REPRODUCIBLE=1: the reductions run on the 'ordered' algorithms (a rank-order fold
    out of the transport, step by step), and a peer killed with them in flight fails every
    read of their outputs all the same."""
    for k, v in HEARTBEAT.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("XCCL_REPRODUCIBLE", "1")
    results = run_world(workers_failures.in_flight, 3, timeout=100, allow_exit=(2,),
                        pg_timeout_s=30, how="kill", device=device, size=workers_failures.BIG)
    check_survivors(results, 3)
