#!/usr/bin/env python3
"""What the flight recorder costs per operation.

1. In process: `iters` record + retire pairs in a recorder of its own
   (torch_xccl._C._flight_recorder_cost, the code launch() and Work completion run), for an
   allreduce of one tensor, an allgather into 8 tensors and a 16-tensor coalesced call;
   median of --repeats runs, ns per pair. The ring is warm after its first lap, so this is
   the steady state: a mutex, a clock read and copies into reused vectors.
2. End to end: 2 ranks, blocking 8-byte allreduce on cpu tensors, with
   TORCH_XCCL_TRACE_BUFFER_SIZE=0 (off) and 2000 (on), the two alternating --rounds times
   each (fresh processes per run); median per-op latency of each.

Usage: python bench/bench_flight_recorder.py [--iters 200000] [--repeats 7] [--rounds 6]
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402


def in_process(iters, repeats):
    import torch
    import torch_xccl

    one = [torch.ones(1024)]
    cases = {
        "allreduce, 1 tensor": (one, one),
        "allgather, 1 -> 8 tensors": (one, [torch.ones(1024) for _ in range(8)]),
        "coalesced, 16 -> 16 tensors": ([torch.ones(4, 4)] * 16, [torch.ones(4, 4)] * 16),
    }
    rows = []
    for name, (ins, outs) in cases.items():
        runs = [torch_xccl._C._flight_recorder_cost(iters, ins, outs) for _ in range(repeats)]
        rows.append((name, statistics.median(runs), min(runs)))
    return rows


WORKER = r"""
import datetime, os, sys, time
import torch, torch.distributed as dist, torch_xccl
rank, world, port, iters = int(sys.argv[1]), 2, int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
dist.init_process_group("xccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world, timeout=datetime.timedelta(seconds=120))
t = torch.ones(2)
for _ in range(500):
    dist.all_reduce(t)
dist.barrier()
start = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(t)
el = time.perf_counter() - start
if rank == 0:
    print(el / iters * 1e6)
dist.destroy_process_group()
"""


def one_run(size, iters):
    port = util.free_port()
    env = dict(os.environ, TORCH_XCCL_TRACE_BUFFER_SIZE=str(size), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(r), str(port), str(iters)],
                              stdout=subprocess.PIPE, text=True, env=env) for r in range(2)]
    out = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), out
    return float(out[0].strip().splitlines()[-1])


def end_to_end(rounds, iters):
    runs = {0: [], 2000: []}
    for i in range(rounds):
        order = (0, 2000) if i % 2 == 0 else (2000, 0)
        for size in order:
            runs[size].append(one_run(size, iters))
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--e2e-iters", type=int, default=5000)
    args = ap.parse_args()
    print(f"# {datetime.datetime.now().isoformat(timespec='seconds')}, {os.cpu_count()} cores, "
          f"{os.uname().nodename}")
    print("\n## record + retire in process (ns per operation)")
    print(f"{'operation':<30} {'median':>8} {'min':>8}")
    for name, med, best in in_process(args.iters, args.repeats):
        print(f"{name:<30} {med:8.1f} {best:8.1f}")
    print(f"\n## 2 ranks, blocking 8-byte allreduce (us per op; {args.rounds} alternating runs "
          f"of {args.e2e_iters} ops each)")
    runs = end_to_end(args.rounds, args.e2e_iters)
    for size, label in ((0, "off (TORCH_XCCL_TRACE_BUFFER_SIZE=0)"), (2000, "on (2000 entries)")):
        r = runs[size]
        print(f"{label:<38} median {statistics.median(r):7.2f}  runs "
              + " ".join(f"{x:.2f}" for x in r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
