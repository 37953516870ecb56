"""PyTorch's OpenReg device tests, pointed at xdev (tests/openreg/run_openreg.py).

The test files are PyTorch's (BSD-3-Clause) and are not vendored here: scripts/openreg_tests.sh
fetches them for the torch release into tests/openreg/upstream/ (or set XCCL_OPENREG_TESTS to
a directory holding them). Without them this test is skipped, saying so."""
import json
import os
import subprocess
import sys

import pytest

from harness import REPO

UPSTREAM = os.environ.get("XCCL_OPENREG_TESTS") or os.path.join(REPO, "tests", "openreg",
                                                                  "upstream")


def _have_tests():
    return os.path.isdir(UPSTREAM) and any(
        f.startswith("test_") and f.endswith(".py") for f in os.listdir(UPSTREAM))


@pytest.mark.timeout(900)
@pytest.mark.skipif(not _have_tests(),
                    reason=f"PyTorch's OpenReg tests are not in {UPSTREAM}: "
                           "bash scripts/openreg_tests.sh fetches them (network)")
def test_pytorch_openreg_suite_passes_on_xdev(tmp_path):
    out = tmp_path / "outcomes.json"
    env = dict(os.environ, PYTHONPATH=REPO)
    p = subprocess.run([sys.executable, os.path.join(REPO, "tests", "openreg", "run_openreg.py"),
                        UPSTREAM, "--json", str(out)], env=env, capture_output=True, text=True,
                       timeout=850)
    summary = [ln for ln in p.stdout.splitlines() if ln.startswith("OPENREG-SUMMARY ")]
    assert summary, p.stdout[-3000:] + p.stderr[-3000:]
    counts = json.loads(summary[-1].split(" ", 1)[1])
    outcomes = json.loads(out.read_text()) if out.exists() else {}
    bad = {k: v[-600:] for k, v in outcomes.items() if v.startswith(("failed", "error"))}
    assert p.returncode == 0 and not bad, (counts, bad)
    assert counts["passed"] >= 100, counts  # the runner really ran the suite
