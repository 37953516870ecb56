#!/usr/bin/env python3
"""What TORCH_XCCL_ENABLE_TIMING and TORCH_XCCL_NAN_CHECK cost per all_reduce.

The knobs are read when a process group is made, so each rank makes one group per
configuration (off, timing, nan-check) in the same processes, and the rounds interleave the
groups: every configuration sees the same machine at the same moments. Reported: median
microseconds per blocking float32 all_reduce over the rounds, and each configuration's
difference to "off". The NaN check reads every input byte once more (a scan at memory
speed) and adds one 4-byte allreduce; the physical floor of the scan is the size divided by
this machine's read bandwidth (the `read` column, timed in the same run).

Usage: python bench/bench_checks.py [--world-size 2] [--sizes 8 1M 64M] [--rounds 9]
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

CONFIGS = {
    "off": {},
    "timing": {"TORCH_XCCL_ENABLE_TIMING": "1"},
    "nan-check": {"TORCH_XCCL_NAN_CHECK": "1"},
}


def rank_main(rank, world, port, q, sizes, rounds):
    try:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        import torch_xccl  # noqa: F401

        timeout = datetime.timedelta(seconds=120)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timeout)
        groups = {}
        for name, env in CONFIGS.items():
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            groups[name] = dist.new_group(backend="xccl", timeout=timeout)
            for k, v in saved.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v
        out = {}
        for size in sizes:
            t = torch.ones(max(1, size // 4))
            iters = max(3, min(200, (64 << 20) // max(size, 1) // 4))
            times = {name: [] for name in CONFIGS}
            reads = []
            for g in groups.values():  # warm-up
                for _ in range(3):
                    dist.all_reduce(t, group=g)
            for _ in range(rounds):
                for name, g in groups.items():
                    dist.barrier(group=g)
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        dist.all_reduce(t, group=g)
                    times[name].append((time.perf_counter() - t0) / iters * 1e6)
                t0 = time.perf_counter()
                for _ in range(iters):
                    t.sum()  # one read of the buffer: the scan's floor
                reads.append((time.perf_counter() - t0) / iters * 1e6)
            out[size] = {name: statistics.median(v) for name, v in times.items()}
            out[size]["read"] = statistics.median(reads)
        if rank == 0:
            q.put(out)
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - reported to the launcher
        import traceback
        q.put({"error": f"{e}\n{traceback.format_exc()}"})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--sizes", nargs="+", default=["8", "1M", "64M"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    sizes = [util.parse_bytes(s) for s in args.sizes]
    res = launch(rank_main, args.world_size, (sizes, args.rounds), args.timeout)
    print(f"{args.world_size} ranks, float32 all_reduce, median us per op over {args.rounds} "
          "interleaved rounds")
    print(f"{'size':>8} | {'off':>9} | {'timing':>9} {'(+)':>8} | {'nan-check':>9} {'(+)':>8} | "
          f"{'read':>8}")
    for size in sizes:
        r = res[size]
        print(f"{util.fmt_bytes(size):>8} | {r['off']:9.1f} | {r['timing']:9.1f} "
              f"{r['timing'] - r['off']:+8.1f} | {r['nan-check']:9.1f} "
              f"{r['nan-check'] - r['off']:+8.1f} | {r['read']:8.1f}")


if __name__ == "__main__":
    main()
