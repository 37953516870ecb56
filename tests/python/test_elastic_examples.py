"""The two survivor examples, end to end (docs/ELASTIC.md).

torchft_xccl.py (when torchft is installed, as scripts/clients.sh does): two torchft replica
groups over torch_xccl.ft on xdev, one SIGKILLed mid-step; the other commits steps alone, the
replacement heals from it, both end with equal weights. On xdev because that is the harder
case (the failed allreduce must leave the stream running: xcclStreamErrorsReport); cpu tensors
go through the same wrapper (`--device cpu`, the example's default).

train_shrink.py (XCCL_TEST_EXAMPLES=1: scripts/clients.sh sets it; about a minute on 2 cores,
kept out of the CI budget, whose sample of the same mechanism is test_survivors.py and the
fault suite's "shrink" runs): DDP on 4 xdev ranks loses one, the survivors shrink and finish
the epoch with the losses of a fresh 3-rank job, a replacement joins for the next epoch.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from harness import REPO

EXAMPLES = os.path.join(REPO, "examples", "elastic")


def _result(cmd, timeout):
    p = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, p.stdout[-3000:] + p.stderr[-3000:]
    return p.returncode, json.loads(lines[-1][len("RESULT "):]), p.stderr[-3000:]


@pytest.mark.skipif(importlib.util.find_spec("torchft") is None, reason="torchft not installed")
@pytest.mark.timeout(240)
def test_torchft_replica_dies_other_goes_on_replacement_heals():
    rc, r, err = _result([os.path.join(EXAMPLES, "torchft_xccl.py"), "--together", "20",
                          "--device", "xdev"], 220)
    assert rc == 0 and r["ok"] and r["device"] == "xdev", (r, err)
    assert r["steps_committed_alone"] > 0 and r["steps_together_after_rejoin"] > 0, r
    assert r["weights_equal"], r


@pytest.mark.skipif(os.environ.get("XCCL_TEST_EXAMPLES") != "1",
                    reason="XCCL_TEST_EXAMPLES=1 runs it (scripts/clients.sh)")
@pytest.mark.timeout(400)
def test_ddp_loses_a_rank_shrinks_finishes_the_epoch_and_regrows():
    rc, r, err = _result([os.path.join(EXAMPLES, "train_shrink.py")], 380)
    assert rc == 0 and r["ok"], (r, err)
    assert r["shrink_matches_reference"] and r["grow_matches_reference"], r
