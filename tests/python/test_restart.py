"""Re-initialisation and restarts (docs/RELIABILITY.md, section 11).

A job torchrun restarts after a worker was SIGKILLed: it resumes and ends right. And
destroy_process_group() then init_process_group("xccl") again in the same processes, 20
times, with collectives, a subgroup and a store-based barrier checked in every cycle, cpu
and xdev tensors in turn: torch hands each default group the same store prefix every time
and keeps the store, so every cycle meets the previous cycles' keys. Real processes, hard
timeouts. (bench/reinit_soak.py runs 100 cycles per configuration.)"""
import os
import signal
import subprocess
import sys

import pytest

import workers_restart
from harness import REPO, free_port, run_world

CYCLES = 20
TRAIN = os.path.join(REPO, "examples", "elastic_restart", "train.py")
TORCHRUN_TIMEOUT = 100


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


# ---------------------------------------------------------------- torchrun --max-restarts

@pytest.mark.timeout(TORCHRUN_TIMEOUT + 20)
def test_torchrun_restarts_an_xccl_job_after_a_worker_is_killed(tmp_path):
    """examples/elastic_restart under torchrun --max-restarts 1 (c10d rendezvous, xdev
    tensors): rank 1 SIGKILLs itself at step 3 of the first attempt; torchrun restarts the
    group, which must resume from the checkpoint at step 3 and end, on both ranks, with the
    parameters of an uninterrupted run. scripts/restart_sweep.py runs the whole matrix."""
    import torch

    sys.path.insert(0, os.path.dirname(TRAIN))
    import train  # the example: its reference run, without torch.distributed

    world, steps = 2, 6
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc-per-node", str(world), "--max-restarts", "1", "--monitor-interval", "0.1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "t",
           TRAIN, "--ckpt-dir", str(tmp_path), "--device", "xdev", "--steps", str(steps),
           "--timeout", "30"]
    env = dict(os.environ, OMP_NUM_THREADS="1", ELASTIC_FAIL_AT="1:3:kill",
               TORCH_XCCL_TRACE_DIR=str(tmp_path / "trace"))
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=TORCHRUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the launcher and every worker
        out, _ = p.communicate()
        pytest.fail(f"torchrun timed out:\n{out[-4000:]}")
    assert p.returncode == 0, out[-4000:]
    assert "[attempt 0] rank 1 fails at step 3 (kill)" in out, out[-4000:]
    for r in range(world):  # the restarted attempt resumed from the checkpoint of step 3
        assert f"[attempt 1] rank {r}/{world} backend=xccl device=xdev:{r} starts at step 3" \
            in out, out[-4000:]
        assert f"[attempt 1] rank {r} done" in out, out[-4000:]
    finals = [torch.load(tmp_path / f"final_rank{r}.pt") for r in range(world)]
    want = train.reference(world, steps)
    for k, v in want.items():
        for r in range(world):
            assert torch.equal(finals[r][k], finals[0][k]), (k, r)
        assert torch.allclose(finals[0][k], v, rtol=0, atol=1e-6), \
            (k, (finals[0][k] - v).abs().max().item())
