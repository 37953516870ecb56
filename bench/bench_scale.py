#!/usr/bin/env python3
"""Scale on one host: xccl against Open MPI (and Gloo through torch) at 8 to 256 processes.

What it measures, for each process count n, in the same run:
  xccl  `xccl-tests all_reduce -p n -z 1`: n forked processes, one communicator each
        (unique-id rendezvous), blocking float32 allreduces on the calling thread; the
        time is the slowest rank's mean (-a 3), in and out of place; creation time is the
        slowest rank's "ready ... in X ms" (XCCL_DEBUG=INFO), and what each rank held at the
        end (peers connected, fds, ring bytes) its "destroyed:" line (xcclCommGetStats).
  mpi   bench/scale_mpi.c under `mpirun --oversubscribe -np n` (built here with mpicc):
        MPI_Init time and blocking in-place MPI_Allreduce, slowest rank's mean.
  gloo  (n <= --gloo-max) bench_torch.py's allreduce rows: xccl and Gloo through torch in
        the same processes, for the same sizes.
Each system runs the same operation counts back to back after a barrier and the same number
of warm-up operations (--iters of each below 1 MiB, a fifth of it from 1 MiB); results are checked by the
xccl-tests and bench_torch runs only when --check is given (at 256 ranks xccl-tests' own
checking costs more than the collectives).

Usage:
  python3 bench/bench_scale.py                                   # 8 .. 256, 8 B / 8 KiB / 1 MiB
  python3 bench/bench_scale.py --nranks 8 32 --iters 10 --name smoke
  python3 bench/bench_scale.py --tcp [--eager] --no-mpi ...     # TCP pairs: on first use / eager
Writes bench/results/<name>.json and prints a markdown table (BENCHMARKS.md section 14).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402

XCCL_TESTS = os.path.join(util.REPO, "build", "tools", "xccl-tests", "xccl-tests")


def run(cmd, env=None, timeout=900):
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t0


def iters_for(size, iters):
    """(timed, warm-up) operations: small sizes run long enough for a steady state (a pair's
    ring pages are touched the first time a message lands on them, about 1 MiB of traffic
    per pair; 30 operations of 8 KiB at 128 ranks measured 13.8 ms, 300 measured 6.2 ms)."""
    return (iters, iters) if size < (1 << 20) else (max(5, iters // 5), 3)


def xccl_point(n, sizes, iters, check, timeout, extra_env=None):
    """One xccl-tests run per size (its size steps are geometric; ours need not be)."""
    out = {"us": {}, "init_ms": [], "dest": [], "warnings": 0, "wrong": 0, "wall_s": 0.0}
    for size in sizes:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.json")
            env = dict(os.environ, XCCL_DEBUG="INFO", XCCL_DEBUG_SUBSYS="INIT",
                       **(extra_env or {}))
            it, warm = iters_for(size, iters)
            cmd = [XCCL_TESTS, "all_reduce", "-p", str(n), "-z", "1", "-a", "3",
                   "-n", str(it), "-w", str(warm), "-c", "1" if check else "0", "-J", path,
                   "-T", str(timeout), "-b", str(size), "-e", str(size)]
            p, wall = run(cmd, env, timeout + 60)
            if p.returncode != 0:
                return {"error": f"xccl-tests exit {p.returncode}: {p.stderr[-800:]}"}
            res = json.load(open(path))
        r = res["results"][0]
        out["us"][size] = min(r["out_of_place"]["time_us"], r["in_place"]["time_us"])
        out["wrong"] += r["out_of_place"]["wrong"] + r["in_place"]["wrong"]
        out["init_ms"] += [int(m) for m in re.findall(r"ready on .* in (\d+) ms", p.stderr)]
        out["dest"] += re.findall(
            r"destroyed: of (\d+) peer\(s\) (\d+) connected via SHM, (\d+) via TCP, "
            r"(\d+) never needed; (\d+) KiB of rings; process: (-?\d+) fds", p.stderr)
        out["warnings"] += p.stderr.count(" WARN ")
        out["wall_s"] += round(wall, 1)
    inits, dest = out.pop("init_ms"), out.pop("dest")
    med = (lambda i: statistics.median(int(x[i]) for x in dest)) if dest else (lambda i: None)
    out.update({"init_ms_max": max(inits) if inits else None,
                "init_ms_median": statistics.median(inits) if inits else None,
                "peers_connected_median": med(1), "tcp_connected_median": med(2),
                "ring_kib_median": med(4),
                "fds_median": med(5)})
    return out


def mpi_point(binary, n, sizes, iters, timeout):
    """One mpirun for every size (MPI_Init takes minutes at 256 processes), each size with
    xccl's operation counts."""
    spec = [f"{s}:{':'.join(map(str, iters_for(s, iters)))}" for s in sizes]
    cmd = [shutil.which("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np", str(n),
           binary, *spec]
    return mpi_run(cmd, timeout)


def mpi_run(cmd, timeout):
    try:
        p, wall = run(cmd, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if p.returncode != 0:
        return {"error": f"mpirun exit {p.returncode}: {p.stderr[-500:]}"}
    out = {"us": {}, "wall_s": round(wall, 1)}
    for line in p.stdout.splitlines():
        f = line.split()
        if f[0] == "init_ms":
            out["init_ms_max"] = float(f[1])
        elif len(f) == 2:
            out["us"][int(f[0])] = float(f[1])
    return out


def build_mpi():
    mpicc = shutil.which("mpicc")
    if mpicc is None or shutil.which("mpirun") is None:
        return None
    binary = os.path.join(util.REPO, "build", "bench", "scale_mpi")
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    subprocess.run([mpicc, "-O2", "-o", binary, os.path.join(util.BENCH, "scale_mpi.c")],
                   check=True)
    return binary


def gloo_points(nranks, sizes, timeout):
    """bench_torch.py's allreduce at these world sizes: {n: {"xccl": {bytes: us}, "gloo": ...}}."""
    if not nranks:
        return {}
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.json")
        # bench_torch steps by a factor and always includes the largest size.
        ss = sorted(sizes)
        lo, hi = ss[0], ss[-1]
        factor = ss[1] // ss[0] if len(ss) > 1 else 2
        cmd = [sys.executable, os.path.join(util.BENCH, "bench_torch.py"), "--world-sizes",
               *map(str, nranks), "--collectives", "allreduce", "--min-bytes", str(lo),
               "--max-bytes", str(hi), "--factor", str(max(2, factor)), "--rounds", "3",
               "--no-memcpy", "--json", out, "--timeout", str(timeout)]
        p, _ = run(cmd, timeout=timeout + 60)
        if p.returncode != 0:
            return {"error": p.stderr[-800:]}
        data = json.load(open(out))
    pts = {}
    for run_ in data.get("runs", []):
        n = run_["world_size"]
        for row in run_.get("results", []):
            for backend in ("xccl", "gloo"):
                if isinstance(row.get(backend), dict):
                    pts.setdefault(n, {}).setdefault(backend, {})[row["bytes"]] = \
                        row[backend]["time_us"]
    return pts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nranks", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    ap.add_argument("--sizes", nargs="+", default=["8", "8K", "1M"])
    ap.add_argument("--iters", type=int, default=100,
                    help="timed (and warm-up) operations below 1 MiB; a fifth of it from 1 MiB")
    ap.add_argument("--gloo-max", type=int, default=32,
                    help="Gloo through torch up to this many ranks (torch processes are heavy)")
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--check", action="store_true", help="xccl-tests checks every result")
    ap.add_argument("--timeout", type=int, default=900, help="per launch (s)")
    ap.add_argument("--tcp", action="store_true",
                    help="xccl over TCP between the processes (XCCL_SHM_DISABLE=1), as across "
                         "hosts: pairs connect on first use (tcp/lazy.cc)")
    ap.add_argument("--eager", action="store_true",
                    help="XCCL_RUNTIME_CONNECT=0: every pair at creation")
    ap.add_argument("--name", default=time.strftime("scale_%Y%m%d"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sizes = [util.parse_bytes(s) for s in a.sizes]
    mpi = None if a.no_mpi else build_mpi()
    if not a.no_mpi and mpi is None:
        print("mpirun/mpicc not found (apt-get install openmpi-bin libopenmpi-dev): no MPI rows",
              file=sys.stderr)
    extra = {}
    if a.tcp:
        extra["XCCL_SHM_DISABLE"] = "1"
    if a.eager:
        extra["XCCL_RUNTIME_CONNECT"] = "0"
    result = {"sizes": sizes, "iters": a.iters, "nproc": os.cpu_count(), "env": extra,
              "points": {}}
    for n in a.nranks:
        pt = {"xccl": xccl_point(n, sizes, a.iters, a.check, a.timeout, extra)}
        if mpi:
            pt["mpi"] = mpi_point(mpi, n, sizes, a.iters, a.timeout)
        result["points"][n] = pt
        print(f"n={n}: {json.dumps(pt)}", file=sys.stderr, flush=True)
    g = gloo_points([n for n in a.nranks if n <= a.gloo_max], sizes, a.timeout)
    if "error" in g:
        print(f"bench_torch failed: {g['error']}", file=sys.stderr)
    else:
        for n, v in g.items():
            result["points"].setdefault(n, {})["torch"] = v
    path = util.write_json(util.result_path(a.json, a.name), result)
    print(f"results: {path}")
    hdr = ["n", "xccl init ms", "mpi init ms", "peers conn.", "fds"]
    for s in sizes:
        hdr += [f"xccl {util.fmt_bytes(s)} µs", f"mpi {util.fmt_bytes(s)} µs",
                f"torch xccl / gloo {util.fmt_bytes(s)} µs"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for n in a.nranks:
        x, m = result["points"][n]["xccl"], result["points"][n].get("mpi", {})
        cells = [str(n), str(x.get("init_ms_max")), str(m.get("init_ms_max", "-")),
                 str(x.get("tcp_connected_median") if a.tcp else
                     x.get("peers_connected_median")), str(x.get("fds_median"))]
        t = result["points"][n].get("torch", {})
        for s in sizes:
            tx, tg = t.get("xccl", {}).get(s), t.get("gloo", {}).get(s)
            cells += [f"{x.get('us', {}).get(s, float('nan')):.0f}",
                      f"{m.get('us', {}).get(s, float('nan')):.0f}" if m.get("us") else "-",
                      f"{tx:.0f} / {tg:.0f}" if tx and tg else "-"]
        print("| " + " | ".join(cells) + " |")
    bad = [n for n in a.nranks if "error" in result["points"][n]["xccl"] or
           result["points"][n]["xccl"].get("wrong")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
