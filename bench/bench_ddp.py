#!/usr/bin/env python3
"""DDP step time: a small CNN trained with DDP over xccl vs over Gloo, interleaved.

Each rank builds one model (fixed seed), copies it, and wraps the copies as
DDP(model, process_group=xccl group) and DDP(model, process_group=gloo group). Every step runs
forward + backward + SGD step for both, alternating which goes first; the step time of each is
taken on every rank and the slowest rank counts. After warm-up steps, the median over the timed
steps is reported. Both models see the same data, so their parameters must stay equal
(checked at the end: a guard that both backends really averaged the gradients).

With --xccl-device xdev the xccl model lives on the simulated accelerator (rank i on xdev:i,
DDP(device_ids=[i]), stream-ordered collectives) while the Gloo model stays on the cpu; an xdev
step is timed to completion (torch.xdev.synchronize() before the clock stops).

Usage: python bench/bench_ddp.py [--world-size 2] [--steps 100] [--xccl-device cpu|xdev]
                                 [--json PATH]
"""
import argparse
import datetime
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
from bench.bench_torch import BACKENDS, init_groups, launch, metadata  # noqa: E402


class SmallCNN(nn.Module):
    """3x32x32 -> 10 classes: three conv+relu+maxpool blocks, then two linear layers."""

    def __init__(self, width=32, hidden=256):
        super().__init__()
        w = width
        self.c1 = nn.Conv2d(3, w, 3, padding=1)
        self.c2 = nn.Conv2d(w, 2 * w, 3, padding=1)
        self.c3 = nn.Conv2d(2 * w, 2 * w, 3, padding=1)
        self.fc1 = nn.Linear(2 * w * 4 * 4, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)   # 16x16
        x = F.max_pool2d(F.relu(self.c2(x)), 2)   # 8x8
        x = F.max_pool2d(F.relu(self.c3(x)), 2)   # 4x4
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def ddp_worker(rank, world_size, port, q, a):
    if a.peer_memory:  # every CPU allocation of 64 KiB or more in xcclMemAlloc memory
        import torch_xccl
        with torch_xccl.peer_memory():
            return _ddp_worker(rank, world_size, port, q, a)
    return _ddp_worker(rank, world_size, port, q, a)


def _ddp_worker(rank, world_size, port, q, a):
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.set_num_threads(1)
        groups = init_groups(rank, world_size, port, a.pg_timeout)
        gloo = groups["gloo"]
        torch.manual_seed(a.seed)
        base = SmallCNN(a.width, a.hidden)
        nparams = sum(p.numel() for p in base.parameters())
        devices = {"xccl": torch.device("cpu"), "gloo": torch.device("cpu")}
        if a.xccl_device == "xdev":
            torch.xdev.set_device(rank % torch.xdev.device_count())
            devices["xccl"] = torch.device("xdev", torch.xdev.current_device())
        on_xdev = devices["xccl"].type == "xdev"
        models, opts = {}, {}
        for b in BACKENDS:
            m = SmallCNN(a.width, a.hidden).to(devices[b])
            m.load_state_dict(base.state_dict())
            ids = [devices[b].index] if devices[b].type == "xdev" else None
            models[b] = DDP(m, device_ids=ids, process_group=groups[b],
                            bucket_cap_mb=a.bucket_cap_mb)
            opts[b] = torch.optim.SGD(models[b].parameters(), lr=a.lr, momentum=0.9)
        gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
        total = a.warmup + a.steps
        cpu_data = [(torch.randn(a.batch, 3, 32, 32, generator=gen),
                     torch.randint(0, 10, (a.batch,), generator=gen))
                    for _ in range(min(total, 8))]
        data = {b: [(x.to(devices[b]), y.to(devices[b])) for x, y in cpu_data] for b in BACKENDS}
        times = {b: [] for b in BACKENDS}
        losses = {b: [] for b in BACKENDS}
        dist.barrier(group=gloo)
        for step in range(total):
            order = BACKENDS if step % 2 == 0 else BACKENDS[::-1]
            for b in order:
                m, opt = models[b], opts[b]
                x, y = data[b][step % len(cpu_data)]
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(m(x), y)
                loss.backward()       # DDP's allreduce of gradient buckets happens here
                opt.step()
                if on_xdev and b == "xccl":
                    torch.xdev.synchronize()
                dt = time.perf_counter() - t0
                if step >= a.warmup:
                    times[b].append(dt)
                losses[b].append(loss.item())
        # slowest rank per step, reduced over gloo after timing
        t = torch.tensor([times[b] for b in BACKENDS], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        # guard: same init + same data => same parameters for both backends, on every rank
        diff = max((p1.cpu() - p2).abs().max().item() for p1, p2 in
                   zip(models["xccl"].parameters(), models["gloo"].parameters()))
        flat = torch.cat([p.detach().cpu().reshape(-1) for p in models["xccl"].parameters()])
        ref = flat.clone()
        dist.broadcast(ref, 0, group=gloo)
        rank_diff = (flat - ref).abs().max().item()
        e = torch.tensor([diff, rank_diff], dtype=torch.float64)
        dist.all_reduce(e, op=dist.ReduceOp.MAX, group=gloo)
        if rank == 0:
            res = {"world_size": world_size, "params": nparams,
                   "xccl_device": a.xccl_device, "peer_memory": a.peer_memory,
                   "grad_bytes": nparams * 4, "batch_per_rank": a.batch,
                   "warmup_steps": a.warmup, "timed_steps": a.steps,
                   "max_param_diff_xccl_vs_gloo": e[0].item(),
                   "max_param_diff_across_ranks": e[1].item(),
                   "final_loss": {b: losses[b][-1] for b in BACKENDS}}
            for i, b in enumerate(BACKENDS):
                st = t[i].tolist()
                res[b] = {"step_ms": statistics.median(st) * 1e3,
                          "step_ms_min": min(st) * 1e3,
                          "step_ms_mean": statistics.fmean(st) * 1e3,
                          "steps_ms": [s * 1e3 for s in st]}
            res["ratio_step_xccl_over_gloo"] = res["xccl"]["step_ms"] / res["gloo"]["step_ms"]
            q.put(res)
        dist.barrier(group=gloo)
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        if rank == 0:
            q.put({"error": traceback.format_exc()})
        raise


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=100, help="timed steps per backend")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--width", type=int, default=32, help="channels of the first conv")
    p.add_argument("--hidden", type=int, default=256, help="hidden units of fc1")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--xccl-device", default="cpu", choices=["cpu", "xdev"],
                   help="where the xccl model lives (the Gloo model is always on the cpu)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--peer-memory", action="store_true",
                   help="run each rank inside torch_xccl.peer_memory(): the gradient buckets "
                        "(and every cpu tensor of 64 KiB or more) in xcclMemAlloc memory, which "
                        "xccl's peers read in place (docs/MEMORY.md)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600, help="hard timeout for the launch (s)")
    p.add_argument("--pg-timeout", type=float, default=300)
    p.add_argument("--name", default=None, help="result name (default ddp_<date>)")
    p.add_argument("--json", default=None, help="default bench/results/<name>.json")
    a = p.parse_args()
    name = a.name or "ddp_" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = util.result_path(a.json, name)

    meta = metadata({"config": vars(a), "model": "SmallCNN (3 conv+relu+maxpool, 2 linear), "
                     "SGD momentum 0.9, cross-entropy, torch.set_num_threads(1) per rank",
                     "method": "two DDP models per rank (process_group = xccl group / gloo "
                               "group), stepped alternately (first backend alternates); step = "
                               "zero_grad+forward+backward+optimizer step; slowest rank per "
                               "step; median over timed steps"})
    cpus = meta["cpu_affinity"] or meta["cpu_count"]
    print(f"torch {meta['torch']}, libxccl {meta['libxccl']}, {meta['cpu_count']} CPUs "
          f"({meta['cpu_model']}), {meta['date']}")
    if a.world_size > cpus:
        print(f"NOTE: {a.world_size} ranks on {cpus} CPUs is oversubscribed.")
    t0 = time.perf_counter()
    try:
        r = launch(ddp_worker, a.world_size, (a,), a.timeout)
    except RuntimeError as e:
        print(f"FAILED: {e}")
        return 1
    r["wall_s"] = time.perf_counter() - t0
    r["oversubscribed"] = a.world_size > cpus
    print(f"\nDDP SmallCNN, {r['params']} params ({r['grad_bytes'] / 2**20:.2f} MiB of fp32 "
          f"gradients), batch {a.batch}/rank, {a.world_size} ranks, {a.steps} timed steps "
          f"after {a.warmup} warm-up (run took {r['wall_s']:.1f} s)")
    print(f"  {'backend':<8} {'median ms':>10} {'min ms':>8} {'mean ms':>8}")
    for b in BACKENDS:
        s = r[b]
        print(f"  {b:<8} {s['step_ms']:10.2f} {s['step_ms_min']:8.2f} {s['step_ms_mean']:8.2f}")
    print(f"  step time xccl/gloo = {r['ratio_step_xccl_over_gloo']:.3f}  (< 1 favours xccl)")
    ok = r["max_param_diff_xccl_vs_gloo"] < 1e-4 and r["max_param_diff_across_ranks"] == 0.0
    print(f"  params: max |xccl - gloo| = {r['max_param_diff_xccl_vs_gloo']:.3g}, "
          f"max across ranks = {r['max_param_diff_across_ranks']:.3g}  "
          f"{'OK' if ok else 'MISMATCH: timings invalid'}")
    r["params_ok"] = ok
    out = {"kind": "ddp", "meta": meta, "result": r}
    util.write_json(path, out)
    print(f"\nwrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
