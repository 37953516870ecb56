"""scripts/gpu_check.sh, the one command that verifies everything GPU-side, checked where CI
runs (no GPU): its step list, its argument errors, the time budget, the summary it writes, and
its CPU scaling step for real at a small size (2 ranks, 64 KiB, the core build CI already has).
"""
import json
import os
import subprocess
import tarfile

import pytest

from harness import REPO

SCRIPT = os.path.join(REPO, "scripts", "gpu_check.sh")


def run(args, out, env=None, timeout=120):
    e = dict(os.environ, OUT=str(out), XCCL_GPU_BUILD=os.path.join(REPO, "build"), **(env or {}))
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd="/")


def summary(out):
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


@pytest.mark.timeout(60)
def test_dry_run_lists_every_step_and_quick_only_its_own(tmp_path):
    full = run(["--dry-run"], tmp_path)
    assert full.returncode == 0, full.stderr
    for step in ("info", "deps", "core", "plugin", "smoke", "ctest", "diag", "probe", "conform",
                 "pytest", "bench", "cpu"):
        assert f"\n{step} " in "\n" + full.stdout, (step, full.stdout)
    assert "xccl-tests\" --conformance -D cuda" in full.stdout
    assert "bench/bench_cuda.py" in full.stdout and "tests/python/test_cuda.py" in full.stdout
    assert "scripts/cuda_pg_probe.py" in full.stdout and "XCCL_CUDA_STATS=1" in full.stdout
    quick = run(["--quick", "--dry-run"], tmp_path)
    listed = [ln.split()[0] for ln in quick.stdout.splitlines() if "(timeout" in ln]
    assert listed == ["info", "deps", "core", "smoke", "diag", "conform"], quick.stdout
    assert not os.path.exists(tmp_path / "summary.json")  # a dry run writes nothing


@pytest.mark.timeout(60)
def test_unknown_step_or_argument_is_refused(tmp_path):
    bad = run(["--only", "info,nosuch"], tmp_path)
    assert bad.returncode == 2 and "unknown step 'nosuch'" in bad.stderr
    bad = run(["--frobnicate"], tmp_path)
    assert bad.returncode == 2 and "unknown argument '--frobnicate'" in bad.stderr


@pytest.mark.timeout(120)
def test_info_step_writes_a_summary_and_the_logs(tmp_path):
    r = run(["--only", "info"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    s = summary(tmp_path)
    assert s["ok"] and [x["step"] for x in s["steps"]] == ["info"], s
    assert s["steps"][0]["status"] == "pass" and s["steps"][0]["torch"].startswith("2.")
    with tarfile.open(tmp_path / "logs.tar.gz") as t:
        assert "logs/info.log" in t.getnames()
    assert "cores:" in (tmp_path / "gpu_check.log").read_text()


@pytest.mark.timeout(120)
def test_a_failing_step_fails_the_run_and_its_tail_is_kept(tmp_path):
    # conformance on CUDA without a GPU (or without a CUDA build) must fail, not pass silently
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("a GPU is here: the CUDA conformance step would pass")
    r = run(["--only", "conform"], tmp_path)
    assert r.returncode == 1, r.stdout
    step = summary(tmp_path)["steps"][0]
    assert step["status"] == "fail" and step["log_tail"], step
    assert not summary(tmp_path)["ok"]


@pytest.mark.timeout(60)
def test_the_budget_skips_steps_it_cannot_fit(tmp_path):
    r = run(["--only", "info,ctest", "--budget", "20"], tmp_path)
    s = summary(tmp_path)
    assert [x["status"] for x in s["steps"]] == ["skipped", "skipped"], s
    assert "budget" in s["steps"][0]["reason"]
    assert r.returncode == 0


@pytest.mark.timeout(300)
def test_cpu_scaling_step_runs_and_records_its_figures(tmp_path):
    r = run(["--only", "cpu"], tmp_path, timeout=280,
            env={"XCCL_GPU_CHECK_RANKS": "2", "XCCL_GPU_CHECK_CPU_MAX": "64K"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    s = summary(tmp_path)
    assert s["steps"][0]["status"] == "pass", s["steps"]
    res = s["results"]
    assert "xccl_tests_cpu_p2" in res and "bench_torch_cpu" in res, sorted(res)
    runs = res["bench_torch_cpu"]["runs"]
    assert runs and runs[0]["world_size"] == 2 and runs[0]["results"], runs
