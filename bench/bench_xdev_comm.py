#!/usr/bin/env python3
"""allreduce through torch on xdev tensors against cpu tensors, the same processes and group.

The cpu path is the host communicator (the call blocks until the result is there). The xdev
path is stream-ordered: the call queues the collective on the group's communication stream and
returns. Two ways of timing it, both to completion:
  * sync   : every call is followed by torch.xdev.synchronize() (the latency a blocking
             caller sees; comparable to one cpu call);
  * stream : ITERS calls back to back, one synchronize at the end (what a training loop sees).
Rounds alternate cpu / xdev / xdev-stream (order rotating); a round's per-op time is the
slowest rank's; the median round is reported, with memcpy bandwidth as the physical limit.

Usage: python bench/bench_xdev_comm.py [--world-size 2] [--max-bytes 64M] [--json PATH]
"""
import argparse
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
from bench.bench_torch import init_groups, launch, measure_memcpy, metadata  # noqa: E402

MODES = ["cpu", "xdev_sync", "xdev_stream"]


def sizes_up_to(max_bytes):
    s, out = 8, []
    while s <= max_bytes:
        out.append(s)
        s *= 8 if s < (1 << 20) else 4
    return out


def iters_for(nbytes):
    return max(5, min(400, (32 << 20) // max(nbytes, 1) // 4))


def worker(rank, world, port, q, a):
    try:
        torch.set_num_threads(1)
        groups = init_groups(rank, world, port, a.pg_timeout)
        gloo = groups["gloo"]
        torch.xdev.set_device(rank % torch.xdev.device_count())
        dev = torch.device("xdev", torch.xdev.current_device())
        rows = []
        for nbytes in sizes_up_to(a.max_bytes):
            n = max(1, nbytes // 4)
            tensors = {"cpu": torch.ones(n), "xdev": torch.ones(n, device=dev)}
            # correctness once per path
            for t in tensors.values():
                t.fill_(rank + 1.0)
                dist.all_reduce(t)
                assert torch.all(t.cpu() == world * (world + 1) / 2), "wrong allreduce result"
            iters = iters_for(nbytes)
            times = {m: [] for m in MODES}
            for rnd in range(a.warmup_rounds + a.rounds):
                order = MODES[rnd % 3:] + MODES[:rnd % 3]
                for m in order:
                    t = tensors["cpu" if m == "cpu" else "xdev"]
                    dist.barrier(group=gloo)
                    torch.xdev.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        dist.all_reduce(t)
                        if m == "xdev_sync":
                            torch.xdev.synchronize()
                    if m == "xdev_stream":
                        torch.xdev.synchronize()
                    dt = (time.perf_counter() - t0) / iters
                    if rnd >= a.warmup_rounds:
                        times[m].append(dt)
            tt = torch.tensor([times[m] for m in MODES], dtype=torch.float64)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX, group=gloo)
            row = {"bytes": n * 4, "iters": iters}
            for i, m in enumerate(MODES):
                row[m + "_us"] = statistics.median(tt[i].tolist()) * 1e6
            row["sync_over_cpu"] = row["xdev_sync_us"] / row["cpu_us"]
            row["stream_over_cpu"] = row["xdev_stream_us"] / row["cpu_us"]
            row["sync_minus_cpu_us"] = row["xdev_sync_us"] - row["cpu_us"]
            rows.append(row)
        if rank == 0:
            q.put({"world_size": world, "rows": rows})
        dist.barrier(group=gloo)
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        if rank == 0:
            q.put({"error": traceback.format_exc()})
        raise


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--max-bytes", type=util.parse_bytes, default=util.parse_bytes("64M"))
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup-rounds", type=int, default=2)
    p.add_argument("--pg-timeout", type=float, default=300)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    memcpy = measure_memcpy()
    res = launch(worker, a.world_size, (a,), a.timeout)
    res["memcpy"] = memcpy
    res["meta"] = metadata({"command": " ".join(sys.argv)})
    print(f"{'bytes':>10} {'cpu us':>10} {'xdev sync':>10} {'xdev strm':>10} "
          f"{'sync/cpu':>9} {'strm/cpu':>9} {'sync-cpu':>9}")
    for r in res["rows"]:
        print(f"{r['bytes']:>10} {r['cpu_us']:>10.1f} {r['xdev_sync_us']:>10.1f} "
              f"{r['xdev_stream_us']:>10.1f} {r['sync_over_cpu']:>9.3f} "
              f"{r['stream_over_cpu']:>9.3f} {r['sync_minus_cpu_us']:>9.1f}")
    path = util.result_path(a.json, "xdev_comm")
    util.write_json(path, res)
    print("wrote", path)


if __name__ == "__main__":
    main()
