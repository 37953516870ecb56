#!/usr/bin/env python3
"""torch-level collective benchmark: xccl vs Gloo, same processes, interleaved rounds.

Each rank process creates the default group with backend "xccl" and a second group over the
same ranks with backend "gloo". For every collective and size it checks the result once per
backend, warms up, then runs ROUNDS rounds alternating xccl / gloo (the backend that goes first
alternates too), each round ITERS back-to-back blocking calls after a common Gloo barrier. A
round's time is the per-op average of the slowest rank; the reported time is the median round.
Sizes, algbw and busbw follow nccl-tests (see DESIGN.md, "Performance, and how to report it").
The parent process measures single-thread memcpy bandwidth first (the physical limit).

Usage: python bench/bench_torch.py --world-sizes 2 4 [--max-bytes 64M] [--json PATH]
"""
import argparse
import datetime
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402

COLLECTIVES = ["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"]
BACKENDS = ["xccl", "gloo"]
# nccl-tests bus-bandwidth factors
BUS_FACTOR = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
# torch 2.13 deprecates *_tensor in favour of *_single (same backend calls: _allgather_base,
# _reduce_scatter_base); use whichever this torch has.
ALLGATHER_FN = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
REDUCE_SCATTER_FN = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
API_NAMES = {
    "allreduce": "all_reduce (in place)",
    "allgather": ALLGATHER_FN.__name__,
    "reduce_scatter": REDUCE_SCATTER_FN.__name__,
    "broadcast": "broadcast (root 0)",
    "alltoall": "all_to_all_single (even splits)",
}


# ----------------------------------------------------------------------------------------------
# helpers shared with bench_ddp.py

def metadata(extra=None):
    try:
        import torch_xccl
        xv = torch_xccl.xccl_version()
        tv = getattr(torch_xccl, "__version__", None)
    except Exception as e:  # noqa: BLE001
        xv, tv = f"unavailable ({e})", None
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    m = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_xccl": tv,
        "libxccl": xv,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model,
        "argv": sys.argv,
        "xccl_env": {k: v for k, v in os.environ.items() if k.startswith("XCCL_")},
    }
    if extra:
        m.update(extra)
    return m


def launch(fn, world_size, fn_args, timeout_s):
    """Spawn world_size processes running fn(rank, world_size, port, queue, *fn_args).

    Returns what rank 0 put on the queue. Hard timeout: on expiry, or as soon as any rank exits
    with an error, every rank is killed and RuntimeError is raised (a hang never stalls)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = util.free_port()
    procs = [ctx.Process(target=fn, args=(r, world_size, port, q) + tuple(fn_args), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    result, err = None, None
    try:
        while True:
            try:
                result = q.get(timeout=0.5)
                break
            except Exception:  # queue.Empty
                pass
            bad = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if bad:
                err = f"rank(s) failed: {bad}"
                break
            if all(p.exitcode == 0 for p in procs):
                err = "all ranks exited without a result"
                break
            if time.monotonic() > deadline:
                err = f"timed out after {timeout_s}s"
                break
        if result is not None and isinstance(result, dict) and "error" in result:
            err, result = f"rank 0 raised:\n{result['error']}", None
        for p in procs:
            p.join(timeout=max(1.0, min(30.0, deadline - time.monotonic())))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    if err:
        raise RuntimeError(err)
    return result


def init_groups(rank, world_size, port, timeout_s):
    """Default group = xccl, plus a gloo group over the same ranks. Returns {name: group}."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch_xccl  # noqa: F401  (routes backend "xccl" to torch_xccl)
    to = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group("xccl", rank=rank, world_size=world_size, timeout=to)
    gloo = dist.new_group(backend="gloo", timeout=to)
    groups = {"xccl": dist.group.WORLD, "gloo": gloo}
    assert dist.get_backend(groups["xccl"]) == "xccl", dist.get_backend(groups["xccl"])
    assert dist.get_backend(groups["gloo"]) == "gloo", dist.get_backend(groups["gloo"])
    assert torch_xccl.is_torch_xccl_backend(groups["xccl"])
    return groups


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# ----------------------------------------------------------------------------------------------
# memcpy: the physical limit

def measure_memcpy(sizes=(1 << 20, 16 << 20, 64 << 20), reps=7):
    """Best-of-reps single-thread copy bandwidth, GB/s (1e9 B/s) of bytes copied (the memory
    traffic is twice that: read + write). Both torch copy_ (1 thread) and numpy.copyto."""
    import numpy as np
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    out = []
    try:
        for n in sizes:
            src = torch.ones(n, dtype=torch.uint8)
            dst = torch.empty(n, dtype=torch.uint8)
            nsrc, ndst = src.numpy(), dst.numpy()
            inner = max(1, (64 << 20) // n)  # keep each timed sample >= ~64 MiB copied
            best = {"torch": float("inf"), "numpy": float("inf")}
            for _ in range(reps):
                for name, fn in (("torch", lambda: dst.copy_(src)),
                                 ("numpy", lambda: np.copyto(ndst, nsrc))):
                    fn()
                    t0 = time.perf_counter()
                    for _ in range(inner):
                        fn()
                    best[name] = min(best[name], (time.perf_counter() - t0) / inner)
            row = {"bytes": n,
                   "torch_GBps": n / best["torch"] / 1e9,
                   "numpy_GBps": n / best["numpy"] / 1e9}
            row["best_GBps"] = max(row["torch_GBps"], row["numpy_GBps"])
            out.append(row)
    finally:
        torch.set_num_threads(old)
    return out


# ----------------------------------------------------------------------------------------------
# collectives

def make_case(coll, size, n, rank, dtype=torch.float32):
    """Buffers for one collective whose nccl-tests "size" is ~size bytes (of dtype: float32,
    or for allreduce any floating type, whose checks' small integers are exact in 16 bits).

    Returns (bytes, count, run(group), check(group) -> max error) where count is the element
    count of the nccl-tests size (allgather: output; reduce_scatter: input; alltoall: the
    per-rank buffer; allreduce/broadcast: the buffer)."""
    esz = torch.tensor([], dtype=dtype).element_size()
    if coll in ("allreduce", "broadcast"):
        count = max(1, size // esz)
    else:  # must split evenly across ranks
        count = max(n, (size // esz) // n * n)
    chunk = count // n
    f32 = dtype

    if coll == "allreduce":
        buf = torch.zeros(count, dtype=f32)  # zeros: repeated in-place sums stay finite

        def run(g):
            dist.all_reduce(buf, group=g)

        def check(g):  # small integers, made in float32 (a 16-bit arange overflows)
            ramp = torch.arange(count, dtype=torch.float32).remainder_(13)
            x = ramp.add(rank).to(f32)
            dist.all_reduce(x, group=g)
            exp = ramp.mul(n).add_(n * (n - 1) / 2)
            return (x.float() - exp).abs().max().item()
    elif coll == "allgather":
        inp = torch.zeros(chunk, dtype=f32)
        out = torch.empty(count, dtype=f32)

        def run(g):
            ALLGATHER_FN(out, inp, group=g)

        def check(g):
            x = torch.arange(chunk, dtype=f32).remainder_(97).add_(1000 * rank)
            o = torch.full((count,), -1.0, dtype=f32)
            ALLGATHER_FN(o, x, group=g)
            exp = torch.cat([torch.arange(chunk, dtype=f32).remainder_(97).add_(1000 * r)
                             for r in range(n)])
            return (o - exp).abs().max().item()
    elif coll == "reduce_scatter":
        inp = torch.zeros(count, dtype=f32)
        out = torch.empty(chunk, dtype=f32)

        def run(g):
            REDUCE_SCATTER_FN(out, inp, group=g)

        def check(g):
            x = torch.arange(count, dtype=f32).remainder_(13).add_(rank)
            o = torch.full((chunk,), -1.0, dtype=f32)
            REDUCE_SCATTER_FN(o, x, group=g)
            seg = torch.arange(rank * chunk, (rank + 1) * chunk, dtype=f32).remainder_(13)
            exp = seg.mul_(n).add_(n * (n - 1) / 2)
            return (o - exp).abs().max().item()
    elif coll == "broadcast":
        buf = torch.zeros(count, dtype=f32)

        def run(g):
            dist.broadcast(buf, src=0, group=g)

        def check(g):
            exp = torch.arange(count, dtype=f32).remainder_(251).add_(1)
            x = exp.clone() if rank == 0 else torch.full((count,), -1.0, dtype=f32)
            dist.broadcast(x, src=0, group=g)
            return (x - exp).abs().max().item()
    elif coll == "alltoall":
        inp = torch.zeros(count, dtype=f32)
        out = torch.empty(count, dtype=f32)

        def run(g):
            dist.all_to_all_single(out, inp, group=g)

        def check(g):
            base = torch.arange(chunk, dtype=f32).remainder_(5).mul_(1000)
            x = torch.cat([base + (rank * n + j) for j in range(n)])
            o = torch.full((count,), -1.0, dtype=f32)
            dist.all_to_all_single(o, x, group=g)
            exp = torch.cat([base + (j * n + rank) for j in range(n)])
            return (o - exp).abs().max().item()
    else:
        raise ValueError(coll)
    return count * esz, count, run, check


def iters_for(nbytes, a):
    return max(a.min_iters, min(a.iters, math.ceil(a.round_bytes / max(nbytes, 1))))


def coll_worker(rank, world_size, port, q, a):
    try:
        torch.set_num_threads(1)
        groups = init_groups(rank, world_size, port, a.pg_timeout)
        gloo = groups["gloo"]
        n = world_size
        results = []
        t_start = time.perf_counter()
        for coll in a.collectives:
            for size in a.sizes:
                if a.peer_memory:  # the case's tensors in xcclMemAlloc memory
                    import torch_xccl
                    with torch_xccl.peer_memory():
                        nbytes, count, run, check = make_case(coll, size, n, rank, getattr(torch, a.dtype))
                else:
                    nbytes, count, run, check = make_case(coll, size, n, rank, getattr(torch, a.dtype))
                # correctness guard, once per size and backend, before timing
                errs = {b: check(groups[b]) for b in BACKENDS}
                iters = iters_for(nbytes, a)
                warm = max(1, min(a.warmup, iters))
                for b in BACKENDS:
                    for _ in range(warm):
                        run(groups[b])
                times = {b: [] for b in BACKENDS}
                for r in range(a.rounds):
                    order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]
                    for b in order:
                        g = groups[b]
                        dist.barrier(group=gloo)  # same sync point for both backends
                        t0 = time.perf_counter()
                        for _ in range(iters):
                            run(g)
                        times[b].append((time.perf_counter() - t0) / iters)
                # slowest rank per round (reduced over gloo, outside the timed region)
                t = torch.tensor([times[b] for b in BACKENDS], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
                e = torch.tensor([errs[b] for b in BACKENDS], dtype=torch.float64)
                dist.all_reduce(e, op=dist.ReduceOp.MAX, group=gloo)
                if rank == 0:
                    row = {"collective": coll, "api": API_NAMES[coll], "bytes": nbytes,
                           "count": count, "dtype": a.dtype, "iters": iters,
                           "rounds": a.rounds}
                    for i, b in enumerate(BACKENDS):
                        rounds_s = t[i].tolist()
                        med = median(rounds_s)
                        algbw = nbytes / med / 1e9
                        row[b] = {"time_us": med * 1e6,
                                  "time_us_min": min(rounds_s) * 1e6,
                                  "rounds_us": [x * 1e6 for x in rounds_s],
                                  "algbw_GBps": algbw,
                                  "busbw_GBps": algbw * BUS_FACTOR[coll](n),
                                  "max_abs_err": e[i].item(),
                                  "correct": e[i].item() == 0.0}
                    row["ratio_busbw_xccl_over_gloo"] = (row["xccl"]["busbw_GBps"]
                                                         / row["gloo"]["busbw_GBps"])
                    row["ratio_time_xccl_over_gloo"] = (row["xccl"]["time_us"]
                                                        / row["gloo"]["time_us"])
                    results.append(row)
                    if a.progress:
                        print(f"  [n={n}] {coll:<14} {util.fmt_bytes(nbytes):>8}  "
                              f"xccl {row['xccl']['time_us']:10.1f} us  "
                              f"gloo {row['gloo']['time_us']:10.1f} us", flush=True)
        elapsed = time.perf_counter() - t_start
        dist.barrier(group=gloo)
        if rank == 0:
            import torch_xccl
            q.put({"world_size": n, "results": results, "elapsed_s": elapsed,
                   "xccl_describe": torch_xccl.describe()})
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        if rank == 0:
            q.put({"error": traceback.format_exc()})
        raise


# ----------------------------------------------------------------------------------------------
# output

def print_memcpy(rows):
    print("Single-thread memcpy (physical limit), best of several, GB/s of bytes copied:")
    print(f"  {'size':>8} {'torch copy_':>12} {'numpy.copyto':>13} {'best':>8}")
    for r in rows:
        print(f"  {util.fmt_bytes(r['bytes']):>8} {r['torch_GBps']:12.2f} {r['numpy_GBps']:13.2f} "
              f"{r['best_GBps']:8.2f}")


def print_run(run, cpus):
    n = run["world_size"]
    over = " -- OVERSUBSCRIBED: %d ranks on %s CPUs" % (n, cpus) if n > (cpus or n) else ""
    print(f"\n=== world size {n}{over} (run took {run['elapsed_s']:.1f} s) ===")
    by = {}
    for row in run["results"]:
        by.setdefault(row["collective"], []).append(row)
    for coll, rows in by.items():
        print(f"\n{coll}  [{rows[0]['api']}; {rows[0].get('dtype', 'float32')}; busbw factor "
              f"{BUS_FACTOR[coll](n):.3g}; time = median of {rows[0]['rounds']} rounds]")
        print(f"  {'size':>8} {'count':>10} | {'xccl us':>10} {'algbw':>7} {'busbw':>7} | "
              f"{'gloo us':>10} {'algbw':>7} {'busbw':>7} | {'busbw x/g':>9} {'time x/g':>8} ok")
        for r in rows:
            x, g = r["xccl"], r["gloo"]
            ok = "y" if x["correct"] and g["correct"] else \
                f"WRONG(x={x['max_abs_err']:.3g},g={g['max_abs_err']:.3g})"
            print(f"  {util.fmt_bytes(r['bytes']):>8} {r['count']:>10} | {x['time_us']:10.1f} "
                  f"{x['algbw_GBps']:7.3f} {x['busbw_GBps']:7.3f} | {g['time_us']:10.1f} "
                  f"{g['algbw_GBps']:7.3f} {g['busbw_GBps']:7.3f} | "
                  f"{r['ratio_busbw_xccl_over_gloo']:9.2f} {r['ratio_time_xccl_over_gloo']:8.2f} "
                  f"{ok}")
    print("  (us = microseconds per op; algbw/busbw in GB/s = 1e9 B/s; x/g = xccl / gloo: "
          "busbw > 1 and time < 1 favour xccl)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--world-sizes", "--world-size", type=int, nargs="+", default=[2])
    p.add_argument("--min-bytes", default="8")
    p.add_argument("--max-bytes", default="64M")
    p.add_argument("--factor", type=int, default=4, help="size step (max-bytes always included)")
    p.add_argument("--collectives", nargs="+", default=COLLECTIVES, choices=COLLECTIVES)
    p.add_argument("--iters", type=int, default=50, help="max ops per round (small sizes)")
    p.add_argument("--min-iters", type=int, default=2, help="min ops per round (large sizes)")
    p.add_argument("--round-bytes", default="128M",
                   help="ops per round = clamp(round-bytes / size, min-iters, iters)")
    p.add_argument("--rounds", type=int, default=7, help="rounds per backend (interleaved)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up ops per backend and size")
    p.add_argument("--timeout", type=float, default=900, help="hard timeout per launch (s)")
    p.add_argument("--pg-timeout", type=float, default=300, help="process-group timeout (s)")
    p.add_argument("--no-memcpy", action="store_true")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="element type (not float32: allreduce only)")
    p.add_argument("--peer-memory", action="store_true",
                   help="make each case's tensors inside torch_xccl.peer_memory() (xcclMemAlloc "
                        "memory: xccl's peers read them in place)")
    p.add_argument("--compete", type=int, default=0,
                   help="run N CPU-bound processes (busy loops) beside the ranks, to measure "
                        "under load (issue 15's fairness goal)")
    p.add_argument("--name", default=None, help="result name (default collectives_<date>)")
    p.add_argument("--json", default=None, help="default bench/results/<name>.json")
    p.add_argument("--quiet", dest="progress", action="store_false",
                   help="no per-size progress lines")
    a = p.parse_args()
    if a.dtype != "float32" and a.collectives != ["allreduce"]:
        p.error("--dtype other than float32 needs --collectives allreduce")

    lo, hi = util.parse_bytes(a.min_bytes), util.parse_bytes(a.max_bytes)
    a.round_bytes = util.parse_bytes(a.round_bytes)
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= a.factor
    if sizes[-1] != hi:
        sizes.append(hi)
    a.sizes = sizes
    name = a.name or "collectives_" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = util.result_path(a.json, name)

    meta = metadata({"sizes": sizes, "world_sizes": a.world_sizes,
                     "config": {k: v for k, v in vars(a).items() if k != "sizes"},
                     "api": API_NAMES,
                     "method": "per size: correctness check per backend, warm-up, then "
                               "rounds alternating xccl/gloo (first backend alternates); "
                               "each round = iters blocking ops after a gloo barrier; round "
                               "time = slowest rank's per-op mean; reported = median round. "
                               "nccl-tests size/algbw/busbw; GB/s = 1e9 B/s."})
    print(f"torch {meta['torch']}, libxccl {meta['libxccl']}, {meta['cpu_count']} CPUs "
          f"({meta['cpu_model']}), {meta['date']}")
    cpus = meta["cpu_affinity"] or meta["cpu_count"]
    out = {"kind": "collectives", "meta": meta, "memcpy": None, "runs": []}
    if not a.no_memcpy:
        out["memcpy"] = measure_memcpy()
        print_memcpy(out["memcpy"])

    competitors = start_competitors(a.compete)
    try:
        failed = run_world_sizes(a, out, cpus)
    finally:
        for c in competitors:
            c.kill()
            c.wait()
    out["competitors"] = a.compete

    util.write_json(path, out)
    print(f"\nwrote {path}")
    return 1 if failed else 0


def start_competitors(n):
    """n processes spinning in a loop: compute that shares the cores with the ranks."""
    if n:
        print(f"\n{n} CPU-bound competitor process(es) run beside the ranks", flush=True)
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def run_world_sizes(a, out, cpus):
    failed = False
    for n in a.world_sizes:
        if n > cpus:
            print(f"\nNOTE: world size {n} on {cpus} CPUs is oversubscribed; "
                  f"its numbers measure scheduling as much as the library.", flush=True)
        t0 = time.perf_counter()
        try:
            run = launch(coll_worker, n, (a,), a.timeout)
        except RuntimeError as e:
            print(f"\nworld size {n}: FAILED: {e}", flush=True)
            out["runs"].append({"world_size": n, "error": str(e)})
            failed = True
            continue
        run["wall_s"] = time.perf_counter() - t0
        run["oversubscribed"] = n > cpus
        out["runs"].append(run)
        print_run(run, cpus)
        if any(not (r["xccl"]["correct"] and r["gloo"]["correct"]) for r in run["results"]):
            failed = True
            print("\nWRONG RESULTS above: those timings are invalid.")
    return failed


if __name__ == "__main__":
    sys.exit(main())
