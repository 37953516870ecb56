"""Making a subgroup: dist.split_group (xcclCommSplit, no store round) against dist.new_group
(a fresh communicator over the store), on the same ranks in the same run.

    python3 bench/bench_split.py --worlds 2,4,8 --reps 10

Each rank of a `world`-rank job (bound to its device: torch's split_group needs it) makes
`reps` subgroups of each kind, halves of the world (rank parity), and runs one allreduce on
each to show it works; the time of a creation is the slowest rank's, from a barrier before it
to the creation's return. Writes bench/results/split_<device>.json.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402


def rank_main(rank, world, port, reps, device, out):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist
    import torch_xccl  # noqa: F401

    index = rank % torch.xdev.device_count()  # split_group needs a bound accelerator
    torch.xdev.set_device(index)
    dev = torch.device("xdev", index)
    dist.init_process_group("xccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120),
                            device_id=dev)
    halves = [list(range(0, world, 2)), list(range(1, world, 2))]
    mine = halves[rank % 2]
    times = {"split_group": [], "new_group": []}
    keep = []
    for _ in range(reps):
        for kind in ("split_group", "new_group"):
            dist.barrier()
            t0 = time.perf_counter()
            if kind == "split_group":
                g = dist.split_group(split_ranks=halves)
            else:
                groups = [dist.new_group(h) for h in halves]  # collective over the world
                g = groups[rank % 2]
            t = torch.ones(4, device=dev)
            dist.all_reduce(t, group=g)
            assert t[0].item() == len(mine)
            times[kind].append(time.perf_counter() - t0)
            keep.append(g)
    out.put((rank, times))
    dist.barrier()
    dist.destroy_process_group()


def run(world, reps, device):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = util.free_port()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, reps, device, q))
             for r in range(world)]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=600) for _ in range(world))
    for p in procs:
        p.join(120)
    result = {}
    for kind in ("split_group", "new_group"):
        slowest = [max(got[r][kind][i] for r in range(world)) for i in range(reps)]
        result[kind + "_median_ms"] = statistics.median(slowest) * 1000
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--device", default="xdev", choices=["xdev"])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    for world in (int(w) for w in args.worlds.split(",")):
        r = {"world": world, **run(world, args.reps, args.device)}
        print(f"{world} ranks: split_group {r['split_group_median_ms']:.1f} ms, "
              f"new_group {r['new_group_median_ms']:.1f} ms", flush=True)
        rows.append(r)
    util.write_json(util.result_path(args.json, f"split_{args.device}"),
                    {"device": args.device, "reps": args.reps, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
