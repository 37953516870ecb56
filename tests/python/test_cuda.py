"""xccl on CUDA tensors (the CUDA reference device), real processes with hard timeouts.

Skipped, with the reason, where torch has no CUDA or the machine no GPU: the CUDA device is
then compiled (libxccl's CUDA objects, the backend's CUDA branches) but not run. On a GPU
machine every rank sits on cuda:(rank % GPU count), so two and three ranks share one GPU,
which NCCL refuses and xccl allows; the references are computed values, gloo on cpu from
the same seed (DDP), a single process (SyncBatchNorm, FSDP2) and nccl itself (one rank)."""
import pytest
import torch

import workers_collectives
import workers_cuda
import workers_xdev
from harness import run_world

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason=f"no CUDA in this torch ({torch.__version__}) or no GPU on this machine: the "
           "CUDA device is compiled here, not run",
)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("world", [2, 3])
def test_collective_matrix_on_cuda(world):
    results = run_world(workers_collectives.matrix, world, timeout=360, device="cuda")
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:50])
    assert all(r["checks"] > 150 for r in results), [r["checks"] for r in results]


@pytest.mark.timeout(300)
def test_ddp_on_cuda_matches_gloo_on_cpu():
    results = run_world(workers_xdev.ddp_on_xdev, 2, timeout=260, device="cuda")
    for r in results:
        for key in ("plain", "no_sync", "unused", "static", "small_buckets", "round_robin"):
            assert r[key] < 1e-5, (key, r)
        assert r["fp16"] < 1e-3 and r["bf16"] < 1e-2, r
    assert results[0]["losses_differ_by_rank"] != results[1]["losses_differ_by_rank"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world", [2, 3])
def test_sync_batchnorm_on_cuda_matches_one_process(world):
    results = run_world(workers_xdev.syncbn_on_xdev, world, timeout=200, device="cuda")
    for r in results:
        assert all(v < 1e-4 for v in r.values()), r


@pytest.mark.timeout(300)
def test_fsdp2_on_cuda_matches_one_process():
    results = run_world(workers_xdev.fsdp2_on_xdev, 2, timeout=260, device_id="cuda",
                        device="cuda")
    for r in results:
        assert r["diff"] < 1e-5, r


@pytest.mark.timeout(240)
def test_one_rank_nccl_and_xccl_agree():
    results = run_world(workers_cuda.nccl_vs_xccl_one_rank, 1, timeout=200)
    assert not results[0]["failures"], "\n".join(results[0]["failures"][:30])
    assert results[0]["checks"] > 20


@pytest.mark.timeout(120)
def test_bad_cuda_input_fails_clearly():
    results = run_world(workers_cuda.cuda_bad_input, 2, timeout=100)
    for r in results:
        assert all(v is True for v in r.values()), r  # a string is the wrong message
