#!/usr/bin/env python3
"""Fairness under load: what a waiting rank costs the compute that shares its cores.

Each launch runs 2 ranks and one CPU-bound competitor process for --seconds. The ranks loop
"compute, then all_reduce": rank r does (1 + r) matmuls per step, so rank 0 always waits in the
collective for rank 1, the way a fast rank waits in DDP. A waiter that spins takes CPU from
rank 1 and from the competitor; one that sleeps gives it back. Configurations:

  gloo          the reference
  xccl          default waits (spin up to XCCL_SPIN_US, then sleep on a futex doorbell)
  xccl-spin     XCCL_SPIN_US=1e9: spin (with yields) and never sleep, the behaviour before doorbells

Reported per configuration: steps per second of the ranks (the training's speed) and loops
per second of the competitor (the neighbour's speed), relative to a launch with no waiting at
all (compute only, no collective; the steps are the slow rank's, which sets the pace). Higher is better for both.

Usage: python bench/bench_fair.py [--sizes 64K 4M] [--seconds 5] [--repeats 3]
"""
import argparse
import multiprocessing
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
    "none": ("gloo", {}),  # compute only: the ceiling
    "gloo": ("gloo", {}),
    "xccl": ("xccl", {}),
    "xccl-spin": ("xccl", {"XCCL_SPIN_US": "1000000000"}),
}


def competitor(counter, stop):
    n = 0
    while not stop.is_set():
        for _ in range(10000):
            n += 1
        with counter.get_lock():
            counter.value += 10000


def worker(rank, world, port, q, config, nbytes, seconds, dim):
    backend, env = CONFIGS[config]
    os.environ.update(env)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    if backend == "xccl":
        import torch_xccl  # noqa: F401
    dist.init_process_group(backend, rank=rank, world_size=world)
    a = torch.randn(dim, dim)
    buf = torch.ones(max(nbytes // 4, 1))
    dist.barrier()
    steps, t0 = 0, time.perf_counter()
    while True:
        for _ in range(1 + rank):
            torch.mm(a, a)
        steps += 1
        if config == "none":  # no collective: each rank on its own clock
            if time.perf_counter() - t0 > seconds:
                break
            continue
        dist.all_reduce(buf)
        # one decision for every rank: rank 0's clock, shared through a collective
        flag = torch.tensor([1.0 if rank == 0 and time.perf_counter() - t0 > seconds else 0.0])
        dist.all_reduce(flag)
        if flag.item() > 0:
            break
    elapsed = time.perf_counter() - t0
    if config == "none":
        dist.barrier()
    if rank == world - 1:  # the slow rank: the pace of the synchronised runs
        q.put({"steps_per_s": steps / elapsed, "elapsed": elapsed})
    dist.destroy_process_group()


def one(config, nbytes, seconds, dim):
    ctx = multiprocessing.get_context("spawn")
    counter, stop = ctx.Value("q", 0), ctx.Event()
    comp = ctx.Process(target=competitor, args=(counter, stop), daemon=True)
    comp.start()
    c0, t0 = counter.value, time.perf_counter()
    res = launch(worker, 2, (config, nbytes, seconds, dim), seconds * 10 + 60)
    loops = (counter.value - c0) / (time.perf_counter() - t0)
    stop.set()
    comp.join(5)
    res["competitor_loops_per_s"] = loops
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["64K", "4M"])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3, help="launches per configuration (median)")
    ap.add_argument("--dim", type=int, default=192, help="matmul size of the compute step")
    ap.add_argument("--json", default=os.path.join(util.RESULTS, "fair.json"))
    a = ap.parse_args()
    out = {"kind": "fair", "args": vars(a), "date": time.strftime("%Y-%m-%d %H:%M"),
           "cpus": len(os.sched_getaffinity(0)), "results": []}
    for size in a.sizes:
        nbytes = util.parse_bytes(size)
        runs = {c: [] for c in CONFIGS}
        for _ in range(a.repeats):  # configurations interleaved, so drift hits all alike
            for c in CONFIGS:
                if c == "none" and runs[c] and size != a.sizes[0]:
                    continue
                runs[c].append(one(c, nbytes, a.seconds, a.dim))
        med = {c: {k: statistics.median(r[k] for r in v)
                   for k in ("steps_per_s", "competitor_loops_per_s")}
               for c, v in runs.items() if v}
        base = med["none"]
        print(f"\nall_reduce {size} per step, 2 ranks + 1 competitor on {out['cpus']} CPUs "
              f"(median of {a.repeats} x {a.seconds:g} s)")
        print(f"  {'config':<10} {'steps/s':>9} {'of none':>8} {'competitor Mloop/s':>19} "
              f"{'of none':>8}")
        for c, m in med.items():
            print(f"  {c:<10} {m['steps_per_s']:9.1f} {m['steps_per_s'] / base['steps_per_s']:8.2f} "
                  f"{m['competitor_loops_per_s'] / 1e6:19.2f} "
                  f"{m['competitor_loops_per_s'] / base['competitor_loops_per_s']:8.2f}")
        out["results"].append({"size": size, "bytes": nbytes, "median": med, "runs": runs})
    util.write_json(a.json, out)
    print(f"\nwrote {a.json}")


if __name__ == "__main__":
    main()
