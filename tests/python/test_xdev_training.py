"""The training stack on xdev over xccl, real processes with hard timeouts: DDP against gloo
on cpu from the same seed (hooks, no_sync, unused parameters, static graph, round-robin
groups), SyncBatchNorm and FSDP2 against a single-process reference, ZeRO, DTensor."""
import pytest

import workers_xdev
from harness import run_world


@pytest.mark.timeout(240)
def test_ddp_on_xdev_matches_gloo_on_cpu():
    # not bound (device_id): a gloo group beside a bound default group fails in torch
    results = run_world(workers_xdev.ddp_on_xdev, 2, timeout=220)
    for r in results:
        for key in ("plain", "no_sync", "unused", "static", "small_buckets", "round_robin"):
            assert r[key] < 1e-5, (key, r)
        assert r["fp16"] < 1e-3 and r["bf16"] < 1e-2, r
    assert results[0]["losses_differ_by_rank"] != results[1]["losses_differ_by_rank"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world", [2, 3])
def test_sync_batchnorm_on_xdev_matches_one_process(world):
    results = run_world(workers_xdev.syncbn_on_xdev, world, timeout=160)
    for r in results:
        assert all(v < 1e-4 for v in r.values()), r


@pytest.mark.timeout(180)
def test_zero_redundancy_optimizer_on_xdev():
    results = run_world(workers_xdev.zero_on_xdev, 2, timeout=160)
    for r in results:
        assert r["diff"] < 1e-6, r


@pytest.mark.timeout(240)
def test_fsdp2_on_xdev_matches_one_process():
    results = run_world(workers_xdev.fsdp2_on_xdev, 2, timeout=220, device_id="xdev")
    for r in results:
        assert r["diff"] < 1e-5, r


@pytest.mark.timeout(240)
def test_fsdp2_from_a_cpu_model_moves_it_to_xdev_and_matches_one_process():
    results = run_world(workers_xdev.fsdp2_from_cpu_model, 2, timeout=220)
    for r in results:
        assert r["devices"] == ["xdev:0"] or r["devices"] == ["xdev:1"], r
        assert r["params_kept"] and r["diff"] < 1e-5, r


@pytest.mark.timeout(180)
def test_dtensor_redistribute_on_xdev():
    results = run_world(workers_xdev.dtensor_on_xdev, 2, timeout=160, device_id="xdev")
    for r in results:
        assert all(r.values()), r
