"""Never a silent wrong answer, never a false failure.

Ranks that disagree on a collective (kind, dtype, op, root, element count, order) raise on
every rank with both calls named, small and large messages alike; the end-of-job pattern
(collectives, barrier, destroy, exit) never fails a rank; random verified collectives agree
with a local reference (the soak script's CI sample).
"""
import os
import subprocess
import sys

import pytest

import workers_reliability
from harness import REPO, run_world

CASES = ["dtype", "op", "count", "broadcast_root", "reduce_root", "kind", "order"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("numel", [16, 1 << 20], ids=["small", "large"])
@pytest.mark.parametrize("case", CASES)
def test_disagreeing_ranks_all_raise_naming_both_calls(case, numel):
    results = run_world(workers_reliability.disagree, 2, timeout=90, pg_timeout_s=60,
                        case=case, numel=numel)
    for rank, r in enumerate(results):
        assert r["raised"], f"rank {rank} returned a result: {r}"
        assert r["type"] == "DistBackendError", r
        assert r["elapsed"] < 20, f"rank {rank} raised only by timeout: {r}"
        msg = r["msg"]
        assert "collective mismatch" in msg, msg
        assert "rank 0 called" in msg and "rank 1 called" in msg, msg
    # the op names on both sides, e.g. allreduce(float32, 16, sum) and ...(int32, 16, sum)
    msg = results[0]["msg"]
    expect = {
        "dtype": ["allreduce(float32, %d, sum)" % numel, "allreduce(int32, %d, sum)" % numel],
        "op": ["allreduce(float32, %d, sum)" % numel, "allreduce(float32, %d, max)" % numel],
        "count": ["allreduce(float32, %d, sum)" % numel, "allreduce(float32, %d, sum)" % (numel + 1)],
        "broadcast_root": ["root 0)", "root 1)"],
        "reduce_root": ["sum, root 0)", "sum, root 1)"],
        "kind": ["allreduce(", "broadcast("],
        "order": ["allreduce(", "broadcast("],
    }[case]
    for needle in expect:
        assert needle in msg, f"{needle!r} not in {msg}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["dtype", "count", "broadcast_root"])
def test_disagreeing_ranks_on_xdev_tensors_all_raise(case):
    results = run_world(workers_reliability.disagree, 2, timeout=90, pg_timeout_s=60,
                        case=case, numel=1 << 16, device="xdev")
    for rank, r in enumerate(results):
        assert r["raised"], f"rank {rank} returned a result: {r}"
        assert "collective mismatch" in r["msg"], r["msg"]
        assert "rank 0 called" in r["msg"] and "rank 1 called" in r["msg"], r["msg"]


@pytest.mark.timeout(120)
def test_desync_debug_names_the_rank_that_is_behind(monkeypatch):
    monkeypatch.setenv("TORCH_XCCL_DESYNC_DEBUG", "1")
    results = run_world(workers_reliability.skip_one, 3, timeout=100, pg_timeout_s=60)
    for rank in (0, 2):
        r = results[rank]
        assert r["raised"], r
        msg = r["msg"]
        assert "TORCH_XCCL_DESYNC_DEBUG" in msg, msg
        assert "rank 1: #2 broadcast(" in msg, msg
        assert "rank(s) 1 are behind" in msg, msg


@pytest.mark.timeout(240)
def test_exit_right_after_barrier_never_fails_a_rank():
    # A sample of bench/exit_soak.py's pattern (which runs it hundreds of times): the
    # processes are real and leave at once after destroy_process_group().
    for _ in range(6):
        results = run_world(workers_reliability.exit_after_barrier, 2, timeout=60,
                            iters=200, numel=256)
        assert all(r["ok"] for r in results), results


@pytest.mark.timeout(300)
def test_soak_sample_of_random_verified_collectives():
    cmd = [sys.executable, os.path.join(REPO, "bench", "soak.py"), "--ops", "500",
           "--world-sizes", "2", "3", "--max-bytes", "4M", "--seed", "7", "--timeout", "240"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "0 mismatches, 0 errors" in p.stdout, p.stdout[-2000:]


@pytest.mark.timeout(120)
def test_soak_checker_catches_a_corrupted_result():
    cmd = [sys.executable, os.path.join(REPO, "bench", "soak.py"), "--ops", "40",
           "--world-sizes", "2", "--max-bytes", "64K", "--inject-fault", "--timeout", "100"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=110)
    assert p.returncode != 0, p.stdout[-2000:]
    assert "wrong result" in p.stdout and "FAILED" in p.stdout, p.stdout[-2000:]


@pytest.mark.timeout(150)
def test_dropping_finished_works_never_deadlocks_with_get_future():
    results = run_world(workers_reliability.drop_finished_while_asking_futures, 2, timeout=120,
                        pg_timeout_s=60, iters=1500)
    for r in results:
        assert r["sum"] == [2.0] * 4 and r["last"] == [2.0] * 8, r
