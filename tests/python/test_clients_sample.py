"""A sample of tests/clients in the regular suite: the transformers Trainer (tiny GPT-2, bf16
mixed precision, two ranks under torchrun) on xdev over xccl against the same run on cpu
over gloo. Everything else (every client x cpu/xdev x fp32/bf16) runs from
scripts/clients.sh (tests/clients/matrix.py)."""
import importlib.util
import os
import sys

import pytest

from harness import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "clients"))
import matrix  # noqa: E402


@pytest.mark.timeout(400)
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None
                    or importlib.util.find_spec("accelerate") is None,
                    reason="transformers/accelerate not installed (scripts/clients.sh installs "
                           "them; tests/clients runs every client)")
def test_transformers_trainer_bf16_on_xdev_matches_gloo(tmp_path):
    client, precision = "transformers", "bf16"
    reference = matrix.run_cell(client, "cpu-gloo", precision, str(tmp_path), timeout=180)
    ref_cell = matrix.judge(reference, None, "cpu")
    assert ref_cell.get("ok"), ref_cell
    run = matrix.run_cell(client, "xdev-xccl", precision, str(tmp_path), timeout=180)
    cell = matrix.judge(run, reference, "xdev",
                        matrix.TOLERANCE_BY_CELL.get((client, "xdev-xccl", precision)))
    assert cell.get("ok"), cell
    assert cell["ranks_identical"] and cell["max_diff"] > 0  # bf16 on CUDA's lists: not cpu's
    assert all(r["tied"] and r["param_device"] == f"xdev:{i}" and r["pg_backend"] == "xccl"
               for i, r in enumerate(run["ranks"])), [
        {k: v for k, v in r.items() if k != "params"} for r in run["ranks"]]
