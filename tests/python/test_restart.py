"""Re-initialisation and restarts (docs/RELIABILITY.md, section 10).

destroy_process_group() then init_process_group("xccl") again in the same processes, 20
times, with collectives, a subgroup and a store-based barrier checked in every cycle, cpu
and xdev tensors in turn: torch hands each default group the same store prefix every time
and keeps the store, so every cycle meets the previous cycles' keys. Real processes, hard
timeouts. (bench/reinit_soak.py runs 100 cycles per configuration.)"""
import pytest

import workers_restart
from harness import free_port, run_world

CYCLES = 20


@pytest.mark.timeout(150)
def test_twenty_destroy_and_init_cycles():
    world = 3
    results = run_world(workers_restart.reinit_cycles, world, timeout=130, init=False,
                        port=free_port(), cycles=CYCLES, device="mixed", mode="tcp")
    for rank, r in enumerate(results):
        assert r is not None, f"rank {rank} returned nothing"
        assert r["error"] is None and r["ok"] == CYCLES, \
            f"rank {rank}: {r['ok']}/{CYCLES} cycles, then {r['error']}"
    scopes = results[0]["scopes"]
    for rank, r in enumerate(results[1:], 1):  # every rank agreed on each cycle's scope
        assert r["scopes"] == scopes, (rank, r["scopes"], scopes)
    # torch kept the store (the port's server in rank 0's process), so each cycle is a new
    # generation of it: the keys of one cycle are never those of another
    assert scopes == [f"xccl.local.g{c}" for c in range(CYCLES)], scopes
