"""What the simulated accelerator costs: training steps and op dispatch on xdev vs the CPU.

    python bench/bench_xdev.py                       # CNN and transformer steps, dispatch
    python bench/bench_xdev.py --steps 50 --rounds 7 --json bench/results/xdev.json

xdev computes with the CPU kernels on its own (host) memory, so its cost over the CPU is the
device machinery: the dispatcher's PrivateUse1 fallback, stream synchronisation before each
op, aliasing, and copying new results into device memory. Measured here, in one process
with one thread (torch.set_num_threads(1)), alternating CPU and xdev rounds so machine noise
hits both alike:

- a training step (forward, backward, AdamW step) of a small CNN with BatchNorm (8x3x32x32
  images) and of a small transformer encoder (2 layers, d_model 128, batch 8 x 64 tokens);
  the reported time is the median round's mean step;
- the dispatch cost of one small op (`x.add_(1)` and `x + y` on 64-element tensors): the
  median per-op time, and xdev minus CPU as the device's overhead per op.

Prints a table (and --json FILE). The goal in the issue: an xdev step <= 1.15x the CPU step.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn

import torch_xccl  # noqa: F401  (registers xdev)


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def transformer():
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256,
                                       dropout=0.0, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, num_layers=2), nn.Linear(128, 10))


def make_step(kind, device):
    torch.manual_seed(0)
    model = (cnn() if kind == "cnn" else transformer()).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    if kind == "cnn":
        x = torch.randn(8, 3, 32, 32, generator=g).to(device)
    else:
        x = torch.randn(8, 64, 128, generator=g).to(device)
    y = torch.randint(0, 10, (8,), generator=g).to(device)

    def step():
        opt.zero_grad()
        out = model(x)
        if out.dim() == 3:
            out = out.mean(1)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        return loss

    return step


def sync(device):
    if device.type == "xdev":
        torch.xdev.synchronize()


def time_rounds(fn, device, iters, rounds, warmup=3):
    for _ in range(warmup):
        fn()
    sync(device)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync(device)
        out.append((time.perf_counter() - t0) / iters)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="training steps per round")
    ap.add_argument("--ops", type=int, default=2000, help="small ops per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cpu, xdev = torch.device("cpu"), torch.device("xdev", 0)
    rows = []
    for kind in ("cnn", "transformer"):
        steps = {d.type: make_step(kind, d) for d in (cpu, xdev)}
        t = {"cpu": [], "xdev": []}
        for r in range(args.rounds):  # alternate, who goes first alternates too
            order = (cpu, xdev) if r % 2 == 0 else (xdev, cpu)
            for d in order:
                t[d.type] += time_rounds(steps[d.type], d, args.steps, 1)
        c, x = statistics.median(t["cpu"]) * 1e3, statistics.median(t["xdev"]) * 1e3
        rows.append({"what": f"{kind} training step", "cpu_ms": c, "xdev_ms": x,
                     "ratio": x / c, "rounds_cpu_ms": [v * 1e3 for v in t["cpu"]],
                     "rounds_xdev_ms": [v * 1e3 for v in t["xdev"]]})
    for name, op in (("x.add_(1), 64 elements", lambda a: a.add_(1)),
                     ("x + x, 64 elements", lambda a: a + a)):
        t = {}
        for d in (cpu, xdev):
            a = torch.ones(64, device=d)
            t[d.type] = time_rounds(lambda: op(a), d, args.ops, args.rounds)
        c, x = statistics.median(t["cpu"]) * 1e6, statistics.median(t["xdev"]) * 1e6
        rows.append({"what": f"op {name}", "cpu_us": c, "xdev_us": x, "overhead_us": x - c})
    print(f"torch {torch.__version__}, 1 thread, medians of {args.rounds} alternating rounds")
    print(f"{'':36s} {'cpu':>10s} {'xdev':>10s} {'xdev/cpu or +us':>16s}")
    for r in rows:
        if "cpu_ms" in r:
            print(f"{r['what']:36s} {r['cpu_ms']:8.2f}ms {r['xdev_ms']:8.2f}ms "
                  f"{r['ratio']:15.3f}x")
        else:
            print(f"{r['what']:36s} {r['cpu_us']:8.2f}us {r['xdev_us']:8.2f}us "
                  f"{r['overhead_us']:+14.2f}us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
