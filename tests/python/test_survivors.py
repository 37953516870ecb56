"""Training that survives a lost rank: dist.shrink_group on xccl (docs/ELASTIC.md).

A rank is SIGKILLed after a warm-up; the survivors' collective fails, they find the lost rank
(torch_xccl.survivors.lost_ranks), shrink the default group (xcclCommShrink under
dist.shrink_group) and run collectives on it with the right results.
"""
from __future__ import annotations

import pytest

import workers_survivors
from harness import run_world


def _check(results, world, victim):
    survivors = [r for r in range(world) if r != victim]
    expected_sum = float(sum(r + 1 for r in survivors))
    for r in survivors:
        o = results[r]
        assert o["failed"] is not None, f"rank {r}: the collective with a lost peer went through"
        assert o["failed"][0] == "DistBackendError", o["failed"]
        assert o["lost"] in ([victim], []), o["lost"]
        assert o["size"] == world - 1
        assert o["rank"] == survivors.index(r)
        assert o["default_is_new"]
        assert o["allreduce"] == expected_sum
        assert o["broadcast"] == float(survivors[0])
        assert o["all_gather"] == [float(s) for s in survivors]
        assert o["supports_shrinking"]
    return [results[r] for r in survivors]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("device", ["cpu", "xdev"])
def test_survivors_of_a_killed_rank_shrink_and_continue(device):
    world, victim = 4, 2
    results = run_world(workers_survivors.lose_and_shrink, world, timeout=100,
                        allow_exit=(victim,), pg_timeout_s=30, victim=victim, device=device)
    out = _check(results, world, victim)
    assert all(o["lost"] == [victim] for o in out), [o["lost"] for o in out]
    # A hang guard, not a timing claim (bench/bench_shrink.py measures it).
    assert max(o["seconds_to_first_result"] for o in out) < 20


@pytest.mark.timeout(120)
def test_a_rank_killed_before_the_first_xdev_collective_fails_its_creation_at_once():
    """The fault suite's one late kind (seed 25: 29 of 1000): a rank died while the survivors
    made the group's xdev communicator (lazily, at their first xdev collective), and they
    waited for its record until the group timeout. The device communicator is now a split of
    the host one whose waits watch the members' processes: the creation fails at once,
    naming the dead rank, and the survivors shrink and go on."""
    world, victim = 3, 1
    results = run_world(workers_survivors.lose_and_shrink, world, timeout=100,
                        allow_exit=(victim,), pg_timeout_s=40, victim=victim, device="xdev",
                        warm_on="cpu")
    out = _check(results, world, victim)
    assert all(o["lost"] == [victim] for o in out), [o["lost"] for o in out]
    for o in out:
        assert f"parent rank {victim}" in o["failed"][1] and "is gone" in o["failed"][1], o
    # Far below the 40 s group timeout that the creation used to wait out.
    assert max(o["seconds_to_first_result"] for o in out) < 15


@pytest.mark.timeout(120)
def test_a_revoke_fails_the_others_naming_it_and_they_shrink_it_away():
    world, victim = 3, 1
    results = run_world(workers_survivors.lose_and_shrink, world, timeout=100,
                        allow_exit=(victim,), pg_timeout_s=30, victim=victim, how="revoke")
    out = _check(results, world, victim)
    assert all("revoked" in o["failed"][1] for o in out), [o["failed"] for o in out]
    assert all(o["lost"] == [] for o in out)  # the revoking rank lives


@pytest.mark.timeout(90)
def test_shrink_group_rejects_bad_lists_as_torch_documents():
    results = run_world(workers_survivors.shrink_bad_input, 3, timeout=60)
    for r in results:
        assert r == {"empty": "ValueError", "out_of_range": "ValueError",
                     "duplicate": "ValueError", "everyone": "ValueError",
                     "self": "RuntimeError", "still_works": True}, r


@pytest.mark.timeout(90)
def test_a_batch_that_raises_leaves_no_group_open():
    """Found by the fault suite's shrink runs: an exception inside batch_isend_irecv left the
    thread inside a libxccl group, and every later collective of the thread, on any group,
    was only recorded: its output came back unreduced."""
    results = run_world(workers_survivors.block_that_raises, 2, timeout=60)
    for r in results:
        assert r["raised"] is not None, r
        assert r["cpu"] == [3.0] * 3 and r["xdev"] == [3.0] * 3, r
