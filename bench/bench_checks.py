#!/usr/bin/env python3
"""What the timing, NaN-check, checksum and reproducible knobs cost per all_reduce.

The knobs are read when a process group is made, so each rank makes one group per
configuration (off, and those named: TORCH_XCCL_ENABLE_TIMING, TORCH_XCCL_NAN_CHECK,
XCCL_CHECKSUM, XCCL_REPRODUCIBLE) in the same processes, and the rounds interleave the
groups: every configuration sees the same machine at the same moments (this
machine's noise swings separate runs by +-30 %). Reported: median microseconds per blocking
all_reduce over the rounds, each configuration's difference to "off", and the median of the
per-round ratios to "off". The NaN check reads every input byte once more (a scan at memory
speed) and adds one 4-byte allreduce; the physical floor of the scan is the size divided by
this machine's read bandwidth (the `read` column, timed in the same run).

Usage: python bench/bench_checks.py [--world-size 2] [--sizes 8 1M 64M] [--rounds 9]
           [--dtype float32|bfloat16|float16|...] [--device cpu|xdev]
           [--configs timing nan-check checksum reproducible foldchain no-peer-read ring direct mapped]
           (default: timing nan-check) [--peer-memory]

--peer-memory makes the cpu tensors inside torch_xccl.peer_memory() (xcclMemAlloc memory,
which the peers map: the default reduces it in place with "mapped"; config "ring" takes the
rings with peer reads instead). The `copy` column times one copy of the buffer (a memcpy's
floor of the same bytes, host memory), beside `read` (one read of it).
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
    "checksum": {"XCCL_CHECKSUM": "1"},
    "reproducible": {"XCCL_REPRODUCIBLE": "1"},
    # The same, with the pipelined chain ("foldchain") at every size above `direct`'s.
    "foldchain": {"XCCL_REPRODUCIBLE": "1", "XCCL_FOLDCHAIN_MIN_RANKS": "2"},
    # The rings without the single copy (which checksums turn off): checksums' own cost.
    "no-peer-read": {"XCCL_PEER_READ": "0"},
    # The rings (with their peer reads) instead of "mapped", for buffers peers can map.
    "ring": {"XCCL_ALGO": "allreduce=ring"},
    "direct": {"XCCL_ALGO": "allreduce=direct"},
    # "mapped" at every size (by default it starts at XCCL_PEER_READ_MIN / the device's size).
    "mapped": {"XCCL_ALGO": "allreduce=mapped"},
}
DEFAULT_CONFIGS = ["off", "timing", "nan-check"]


def rank_main(rank, world, port, q, sizes, rounds, dtype, device, configs, peer_memory=False):
    try:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        import torch_xccl  # noqa: F401

        timeout = datetime.timedelta(seconds=120)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timeout)
        if device == "xdev":
            torch.xdev.set_device(rank % torch.xdev.device_count())
            dev = torch.device("xdev", torch.xdev.current_device())
        else:
            dev = torch.device("cpu")
        dt = getattr(torch, dtype)
        groups = {}
        for name in configs:
            env = CONFIGS[name]
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            groups[name] = dist.new_group(backend="xccl", timeout=timeout)
            # Device communicators are made at their first collective: under this env too.
            if peer_memory:
                with torch_xccl.peer_memory(min_bytes=1):
                    z = torch.zeros(1, dtype=dt, device=dev)
            else:
                z = torch.zeros(1, dtype=dt, device=dev)
            dist.all_reduce(z, group=groups[name])
            for k, v in saved.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v
        out = {}
        for size in sizes:
            esize = torch.tensor([], dtype=dt).element_size()
            n = max(1, size // esize)
            if peer_memory:
                with torch_xccl.peer_memory(min_bytes=1):
                    t = torch.zeros(n, dtype=dt, device=dev)  # sums stay finite
            else:
                t = torch.zeros(n, dtype=dt, device=dev)
            host = torch.zeros(n, dtype=dt)  # the read and copy floors, in host memory
            host2 = torch.empty_like(host)
            iters = max(3, min(200, (64 << 20) // max(size, 1) // 4))
            times = {name: [] for name in configs}
            reads, copies = [], []
            for g in groups.values():  # warm-up
                for _ in range(3):
                    dist.all_reduce(t, group=g)
            for _ in range(rounds):
                for name, g in groups.items():
                    # One untimed call first: the floors below (and the configuration before)
                    # push the buffer out of the cache, and at cache-sized buffers whichever
                    # configuration ran first in a round paid for it (identical configurations
                    # read 0.73 x at 4 MiB without this).
                    dist.all_reduce(t, group=g)
                    dist.barrier(group=g)
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        dist.all_reduce(t, group=g)
                    if device == "xdev":
                        torch.xdev.synchronize()
                    times[name].append((time.perf_counter() - t0) / iters * 1e6)
                t0 = time.perf_counter()
                for _ in range(iters):
                    host.sum()  # one read of the buffer: the scan's floor
                reads.append((time.perf_counter() - t0) / iters * 1e6)
                t0 = time.perf_counter()
                for _ in range(iters):
                    host2.copy_(host)  # one copy of the buffer: a memcpy's floor
                copies.append((time.perf_counter() - t0) / iters * 1e6)
            out[size] = {name: statistics.median(v) for name, v in times.items()}
            out[size]["ratio"] = {
                name: statistics.median(x / o for x, o in zip(v, times["off"]))
                for name, v in times.items()}
            out[size]["read"] = statistics.median(reads)
            out[size]["copy"] = statistics.median(copies)
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
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", choices=["cpu", "xdev"], default="cpu")
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, choices=list(CONFIGS))
    ap.add_argument("--peer-memory", action="store_true",
                    help="cpu tensors in torch_xccl.peer_memory() (xcclMemAlloc memory)")
    args = ap.parse_args()
    configs = ["off"] + [c for c in args.configs if c != "off"]
    sizes = [util.parse_bytes(s) for s in args.sizes]
    res = launch(rank_main, args.world_size,
                 (sizes, args.rounds, args.dtype, args.device, configs, args.peer_memory),
                 args.timeout)
    where = f"{args.device}{' (peer_memory)' if args.peer_memory else ''}"
    print(f"{args.world_size} ranks, {args.dtype} all_reduce on {where}, median us per op "
          f"over {args.rounds} interleaved rounds (+: the medians' difference; x: the median of "
          "the per-round ratios)")
    head = f"{'size':>8} | {'off':>9} | "
    head += " | ".join(f"{c:>9} {'(+)':>8} {'(x)':>6}" for c in configs[1:])
    print(head + f" | {'read':>8} | {'copy':>8}")
    for size in sizes:
        r = res[size]
        row = f"{util.fmt_bytes(size):>8} | {r['off']:9.1f} | "
        row += " | ".join(f"{r[c]:9.1f} {r[c] - r['off']:+8.1f} {r['ratio'][c]:6.3f}"
                          for c in configs[1:])
        print(row + f" | {r['read']:8.1f} | {r['copy']:8.1f}")


if __name__ == "__main__":
    main()
