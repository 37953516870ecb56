"""What the client runs share: the command line, the process's device, a small model and its
data, the result file each rank writes, and (launch/compare) how the matrix runs them.

A client script is an ordinary training program for its stack, run by torchrun with two
ranks. Every rank writes ``OUT/rank<r>.pt``: the final parameters (flattened, float32, cpu),
the losses it saw, and what it ran on. ``compare`` checks that the ranks ended bit-identical
and how far the run is from the reference (the same client on cpu over gloo).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

STEPS = 4
BATCH = 8  # per rank
FEATURES = 16


def parse_args(extra=None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=["cpu", "xdev"], required=True)
    p.add_argument("--backend", choices=["gloo", "xccl"], required=True)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--out", required=True)
    for flag, kwargs in (extra or {}).items():
        p.add_argument(flag, **kwargs)
    return p.parse_args()


def rank_info() -> tuple[int, int, int]:
    return (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
            int(os.environ.get("LOCAL_RANK", "0")))


def select_device(args):
    """The rank's device. xdev: xdev:(local rank), selected before anything else, as a CUDA
    script selects its GPU (this also makes xdev the process's accelerator)."""
    import torch

    if args.device == "cpu":
        if args.backend == "xccl":
            import torch_xccl  # noqa: F401  (routes "xccl"; cpu tensors)
        return torch.device("cpu")
    import torch_xccl  # noqa: F401

    index = rank_info()[2] % torch.xdev.device_count()
    torch.xdev.set_device(index)
    return torch.device("xdev", index)


def mlp():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 1))


def dataset(n: int):
    """The global data set: the same on every rank and run."""
    import torch

    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, FEATURES, generator=g)
    y = (x[:, :4].sum(dim=1, keepdim=True) * 0.5).tanh() + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def shard(rank: int, world: int, steps: int = STEPS, batch: int = BATCH):
    """This rank's batches: step s takes rows [s*world*batch + rank*batch, ... + batch)."""
    x, y = dataset(steps * world * batch)
    out = []
    for s in range(steps):
        lo = s * world * batch + rank * batch
        out.append((x[lo:lo + batch], y[lo:lo + batch]))
    return out


def flat_params(params) -> "torch.Tensor":  # noqa: F821 (torch is imported inside)
    import torch

    return torch.cat([p.detach().float().reshape(-1).cpu() for p in params])


def save(args, params, losses, **extra) -> None:
    import torch

    rank = rank_info()[0]
    os.makedirs(args.out, exist_ok=True)
    torch.save({"params": flat_params(params), "losses": [float(v) for v in losses],
                "device": args.device, "backend": args.backend, "precision": args.precision,
                **extra}, os.path.join(args.out, f"rank{rank}.pt"))


# ---------------------------------------------------------------- launching and comparing

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script: str, device: str, backend: str, precision: str, out: str,
           extra: list[str] | None = None, timeout: float = 300.0, nproc: int = 2,
           env_extra: dict | None = None) -> dict:
    """Runs ``script`` under torchrun with ``nproc`` ranks; a hang is killed at ``timeout``.
    Returns {"rc", "seconds", "log", "ranks": [rank results] or None}."""
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO, HERE] + [p for p in
                                          env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}",
           os.path.join(HERE, script), "--device", device, "--backend", backend,
           "--precision", precision, "--out", out, *(extra or [])]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        log, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        log, _ = p.communicate()
        log += f"\n[launch] killed after {timeout}s"
    seconds = time.monotonic() - t0
    ranks = None
    if p.returncode == 0:
        import torch

        ranks = [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(nproc)]
    return {"rc": p.returncode, "seconds": seconds, "log": log, "ranks": ranks}


def compare(run: dict, reference: dict | None) -> dict:
    """ranks_identical: every rank's final parameters equal rank 0's bit for bit.
    max_diff: largest |param - reference param| (rank 0), None without a reference."""
    import torch

    if run["ranks"] is None:
        return {"ok": False, "error": run["log"][-3000:]}
    p0 = run["ranks"][0]["params"]
    same = all(torch.equal(p0, r["params"]) for r in run["ranks"][1:])
    finite = bool(torch.isfinite(p0).all())
    out = {"ranks_identical": same, "finite": finite, "seconds": round(run["seconds"], 1),
           "loss_first": run["ranks"][0]["losses"][0], "loss_last": run["ranks"][0]["losses"][-1]}
    if reference is not None and reference.get("ranks"):
        ref = reference["ranks"][0]["params"]
        out["max_diff"] = (p0 - ref).abs().max().item() if ref.shape == p0.shape else float("inf")
    return out


def dump(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, default=str)
