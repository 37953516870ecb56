"""DDP over xccl matches DDP over gloo; compression hooks; ZeroRedundancyOptimizer."""
import pytest

import workers_misc
from harness import run_world


@pytest.mark.timeout(180)
def test_ddp_parity_and_compression_hooks():
    results = run_world(workers_misc.ddp_parity, 2, timeout=160)
    for r in results:
        assert r["plain"] < 1e-6, r
        assert r["fp16"] < 1e-4, r
        assert r["bf16"] < 1e-3, r
        # compression changes results only a little; it must still train the same model
        assert r["fp16_vs_fp32"] < 1e-2, r
        assert r["bf16_vs_fp32"] < 5e-2, r
    assert results[0]["losses"] != results[1]["losses"]  # ranks really saw different data


@pytest.mark.timeout(180)
def test_zero_redundancy_optimizer():
    results = run_world(workers_misc.zero, 2, timeout=160)
    for r in results:
        assert r["diff"] < 1e-6, r
