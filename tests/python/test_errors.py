"""Bad input raises a Python exception naming the op; a dead peer makes survivors raise."""
import time

import pytest

import workers_misc
from harness import run_world


@pytest.mark.timeout(120)
def test_bad_inputs_raise_named_errors():
    results = run_world(workers_misc.bad_inputs, 2, timeout=100)
    for rank, problems in enumerate(results):
        assert not problems, f"rank {rank}: {problems}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world,victim", [(2, 1), (3, 0)])
def test_dead_peer_survivors_raise_within_timeout(world, victim):
    pg_timeout = 20.0
    start = time.monotonic()
    results = run_world(workers_misc.dead_peer, world, timeout=pg_timeout + 40,
                        pg_timeout_s=pg_timeout, allow_exit=(victim,), victim=victim)
    assert time.monotonic() - start < pg_timeout + 40
    for rank, r in enumerate(results):
        if rank == victim:
            continue
        assert r["raised"], f"rank {rank} did not raise: {r}"
        assert r["type"] == "DistBackendError", r
        assert "xccl allreduce" in r["msg"], r
        assert r["elapsed"] < pg_timeout, r
        assert r["later_ok"], r
