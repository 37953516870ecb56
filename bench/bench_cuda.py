#!/usr/bin/env python3
"""allreduce on CUDA tensors: xccl vs gloo, against the GPU's own device-to-device copy
bandwidth measured in the same run. Needs torch with CUDA and a GPU; ranks sit on
cuda:(rank % GPU count), so with one GPU every rank shares it (what NCCL refuses).

Per size: xccl (calls back to back on the current stream, one synchronize at the end),
gloo on the same CUDA tensors (its own staging), the 8-byte latency of one synchronized
call. busbw = bytes x 2(n-1)/n / time, as nccl-tests. The copy limit: one rank times
`dst.copy_(src)` of the same size on its GPU (read + write of every byte).

Usage: python bench/bench_cuda.py [--world-size 2] [--max-bytes 1G] [--json PATH]
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
from bench.bench_torch import init_groups, launch, metadata  # noqa: E402


def sizes(max_bytes):
    s, out = 1 << 20, []
    while s <= max_bytes:
        out.append(s)
        s *= 4
    return out


def timed(fn, iters, sync):
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def worker(rank, world, port, q, a):
    try:
        groups = init_groups(rank, world, port, a.pg_timeout)
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
        sync = torch.cuda.synchronize
        bus = 2 * (world - 1) / world
        rows = []
        for nbytes in sizes(a.max_bytes):
            n = nbytes // 4
            t = torch.full((n,), float(rank + 1), device=dev)
            dist.all_reduce(t)
            sync()
            assert float(t[0]) == world * (world + 1) / 2, "wrong allreduce result"
            iters = max(3, min(50, (256 << 20) // nbytes))
            x = timed(lambda: dist.all_reduce(t), iters, sync)
            g = timed(lambda: dist.all_reduce(t, group=groups["gloo"]), max(2, iters // 4), sync)
            src, dst = torch.empty_like(t), torch.empty_like(t)
            c = timed(lambda: dst.copy_(src), iters, sync)
            worst = [None] * world
            dist.all_gather_object(worst, (x, g), group=groups["gloo"])
            x, g = max(w[0] for w in worst), max(w[1] for w in worst)
            rows.append({"bytes": nbytes, "xccl_s": x, "gloo_s": g, "copy_s": c,
                         "xccl_busbw_GBs": nbytes * bus / x / 1e9,
                         "gloo_busbw_GBs": nbytes * bus / g / 1e9,
                         "copy_GBs": nbytes / c / 1e9})
        small = torch.ones(2, device=dev)
        lat = [timed(lambda: (dist.all_reduce(small), sync()), 200, sync) for _ in range(5)]
        if rank == 0:
            q.put({"rows": rows, "latency_8B_us": statistics.median(lat) * 1e6,
                   "device": torch.cuda.get_device_name(dev)})
        dist.barrier(group=groups["gloo"])
        dist.destroy_process_group()
    except Exception:
        traceback.print_exc()
        sys.exit(1)


def nccl_worker(rank, world, port, q, a):
    """NCCL through torch on the same GPU(s) and sizes. With one GPU and several ranks NCCL
    refuses (a duplicate GPU): that refusal is the result, recorded as such."""
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        index = rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        dev = torch.device("cuda", index)
        sync = torch.cuda.synchronize
        bus = 2 * (world - 1) / world
        try:
            dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                                    timeout=datetime.timedelta(seconds=a.pg_timeout))
            t = torch.ones(2, device=dev)
            dist.all_reduce(t)
            sync()
        except Exception as e:  # noqa: BLE001 - the refusal is what we report
            if rank == 0:
                q.put({"refused": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
                q.close()
                q.join_thread()
            os._exit(0)
        rows = []
        for nbytes in sizes(a.max_bytes) if world > 1 else []:
            t = torch.full((nbytes // 4,), 1.0, device=dev)
            iters = max(3, min(50, (256 << 20) // nbytes))
            x = timed(lambda: dist.all_reduce(t), iters, sync)
            rows.append({"bytes": nbytes, "nccl_s": x, "nccl_busbw_GBs": nbytes * bus / x / 1e9})
        small = torch.ones(2, device=dev)
        lat = [timed(lambda: (dist.all_reduce(small), sync()), 200, sync) for _ in range(5)]
        if rank == 0:
            q.put({"rows": rows, "latency_8B_us": statistics.median(lat) * 1e6})
        dist.destroy_process_group()
    except Exception:
        traceback.print_exc()
        sys.exit(1)


def one_rank_latency(rank, world, port, q, a):
    """8 B allreduce + synchronize on one rank, xccl and nccl in the same process: the fixed
    cost of a call where NCCL cannot run the same world on one GPU."""
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        import torch_xccl  # noqa: F401
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        dist.init_process_group("xccl", rank=0, world_size=1, device_id=dev)
        nccl = dist.new_group(backend="nccl", device_id=dev)
        sync = torch.cuda.synchronize
        small = torch.ones(2, device=dev)
        out = {}
        for name, g in (("xccl", None), ("nccl", nccl), ("xccl_again", None)):
            lat = [timed(lambda: (dist.all_reduce(small, group=g), sync()), 200, sync)
                   for _ in range(5)]
            out[name] = statistics.median(lat) * 1e6
        q.put(out)
        dist.destroy_process_group()
    except Exception:
        traceback.print_exc()
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--max-bytes", type=util.parse_bytes, default=util.parse_bytes("1G"))
    p.add_argument("--pg-timeout", type=float, default=300)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--no-nccl", action="store_true", help="do not run NCCL beside it")
    p.add_argument("--json")
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_cuda: torch has no CUDA or there is no GPU here; nothing to measure")
    r = launch(worker, a.world_size, (a,), a.timeout)
    print(f"# {r['device']}, {a.world_size} ranks, allreduce float32 (busbw GB/s)")
    print(f"{'size':>8} {'xccl':>9} {'gloo':>9} {'copy':>9} {'xccl/copy':>9} {'xccl/gloo':>9}")
    for row in r["rows"]:
        print(f"{util.fmt_bytes(row['bytes']):>8} {row['xccl_busbw_GBs']:9.1f} "
              f"{row['gloo_busbw_GBs']:9.2f} {row['copy_GBs']:9.1f} "
              f"{row['xccl_busbw_GBs'] / row['copy_GBs']:9.2f} "
              f"{row['gloo_s'] / row['xccl_s']:9.1f}")
    print(f"8 B allreduce, synchronized: {r['latency_8B_us']:.1f} us")
    if not a.no_nccl:
        try:
            r["nccl"] = launch(nccl_worker, a.world_size, (a,), min(a.timeout, 300))
        except RuntimeError as e:
            r["nccl"] = {"failed": str(e)[-400:]}
        try:
            r["one_rank_8B_us"] = launch(one_rank_latency, 1, (a,), 120)
        except RuntimeError as e:
            r["one_rank_8B_us"] = {"failed": str(e)[-400:]}
        n = r["nccl"]
        if "rows" in n:
            print(f"NCCL, same {a.world_size} ranks (busbw GB/s): " + ", ".join(
                f"{util.fmt_bytes(x['bytes'])} {x['nccl_busbw_GBs']:.1f}" for x in n["rows"]))
            print(f"NCCL 8 B allreduce, synchronized: {n['latency_8B_us']:.1f} us")
        else:
            print(f"NCCL at {a.world_size} ranks: {n.get('refused') or n.get('failed')}")
        print(f"one rank, 8 B allreduce + synchronize (us): {r['one_rank_8B_us']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": metadata({"bench": "bench_cuda"}), **r}, f, indent=1)


if __name__ == "__main__":
    main()
