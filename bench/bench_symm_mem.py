#!/usr/bin/env python3
"""torch's symmetric memory on xdev: torch.ops.symm_mem one-shot and two-shot allreduce
against dist.all_reduce (backend xccl) on the same xdev tensors, and a device copy of the
same size (the memory floor), in the same processes and rounds.

Each rank runs on xdev:(rank % 2) with one buffer from symm_mem.empty, rendezvoused once.
Every measurement queues `iters` operations on the current stream and synchronises once at
the end (how a training step issues them); rounds interleave the four, and the median of the
rounds is reported as microseconds per operation and busbw (2(n-1)/n x bytes / time).

Usage: python bench/bench_symm_mem.py [--world-size 2] [--sizes 8 64K 1M 16M 64M] [--rounds 7]
"""
import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
from bench.bench_torch import launch  # noqa: E402

KINDS = ("one_shot", "two_shot", "all_reduce", "copy")


def rank_main(rank, world, port, q, sizes, rounds):
    try:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        import torch_xccl  # noqa: F401
        import torch.distributed._symmetric_memory as symm_mem

        dev = torch.device("xdev", rank % 2)
        torch.xdev.set_device(dev)
        dist.init_process_group("xccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=300),
                                device_id=dev)
        name = dist.group.WORLD.group_name
        out = {}
        for size in sizes:
            n = max(1, size // 4)
            buf = symm_mem.empty(n, device=dev)
            buf.fill_(1.0)
            symm_mem.rendezvous(buf, name)
            res = torch.empty(n, device=dev)
            plain = torch.ones(n, device=dev)
            iters = max(3, min(200, (64 << 20) // max(size, 1) // 4))
            sm = torch.ops.symm_mem
            ops = {
                "one_shot": lambda b=buf, o=res: sm.one_shot_all_reduce_out(b, "sum", name, o),
                "two_shot": lambda b=buf: sm.two_shot_all_reduce_(b, "sum", name),
                "all_reduce": lambda p=plain: dist.all_reduce(p),
                "copy": lambda o=res, p=plain: o.copy_(p),
            }
            times = {k: [] for k in KINDS}
            for _ in range(rounds + 1):  # the first round warms up
                for k in KINDS:
                    dist.barrier()
                    torch.xdev.synchronize(dev)
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        ops[k]()
                    torch.xdev.synchronize(dev)
                    times[k].append((time.perf_counter() - t0) / iters * 1e6)
            out[size] = {k: statistics.median(v[1:]) for k, v in times.items()}
            del buf, ops  # the buffer goes before the next size's
        if rank == 0:
            q.put(out)
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - reported to the launcher
        import traceback
        q.put({"error": f"{e}\n{traceback.format_exc()}"})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--sizes", nargs="+", default=["8", "64K", "1M", "16M", "64M"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    sizes = [util.parse_bytes(s) for s in args.sizes]
    res = launch(rank_main, args.world_size, (sizes, args.rounds), args.timeout)
    w = args.world_size
    print(f"{w} ranks on xdev, float32, median us per op over {args.rounds} interleaved rounds "
          "(busbw GB/s in brackets; copy: one device copy of the size)")
    print(f"{'size':>8} | " + " | ".join(f"{k:>18}" for k in KINDS))
    for size in sizes:
        r = res[size]
        cells = []
        for k in KINDS:
            factor = 1.0 if k == "copy" else 2 * (w - 1) / w
            gbs = factor * size / (r[k] * 1e-6) / 1e9
            cells.append(f"{r[k]:9.1f} ({gbs:5.2f})")
        print(f"{util.fmt_bytes(size):>8} | " + " | ".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
