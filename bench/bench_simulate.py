#!/usr/bin/env python3
"""Calibrate the cost model (`xccl-topo simulate`, docs/SIMULATOR.md) against measured runs on
this host, check it on runs it was not fitted to, and draw what it predicts for a cluster.

1. Measure: `xccl-tests <collective> -p N` with each algorithm forced (XCCL_ALGO),
   at a few sizes and rank counts (N processes on this machine's cores: past the core count
   the ranks time-slice, which the model covers with its `cores` term).
2. Fit: the model is linear in its constants (CostFeatures x CostParams), so the constants
   come from a non-negative least-squares fit of `xccl-topo simulate --json`'s features to
   the measured times, weighted to minimise relative error, on the calibration points only.
3. Check: predicted vs measured for every point, calibration and held-out, with the error;
   and whether the selector's pick is the measured fastest.
4. Predict: allreduce time per algorithm from 64 to 16,384 ranks on a described cluster
   (tools/xccl-topo/examples/two-hosts-8-devices.topo, its first host copied), the
   selector's pick marked: bench/simulate_scale.png.

  python3 bench/bench_simulate.py [--quick] [--params-out bench/results/sim_params.txt]
                                  [--json PATH] [--plot bench/simulate_scale.png]

Uses build/tools/xccl-tests/xccl-tests and build/tools/xccl-topo/xccl-topo (the core build).
With --net (root): the network constants too. Hosts are network namespaces on a bridge
(tests/python/netns.py), each side's egress shaped with `tc tbf` to --rate (1 Gbit/s: the
network then dominates, as on a real cluster's slower links), one xccl-tests process per rank
launched in its host's namespace; the host-memory constants are read from --params-in, the
network's (net_alpha_us, net_gbs) fitted on 2-host shapes and checked on 4-host ones, and the
whole set written to --params-out. All namespace hosts share this machine's cores, which the
fit accounts for (cores per host = cores / hosts).

  sudo python3 bench/bench_simulate.py --net [--rate 1gbit] --params-in bench/simulate_params_2core.txt
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from scipy.optimize import nnls

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402

XCCL_TESTS = os.path.join(util.REPO, "build", "tools", "xccl-tests", "xccl-tests")
XCCL_TOPO = os.path.join(util.REPO, "build", "tools", "xccl-topo", "xccl-topo")
CLUSTER = os.path.join(util.REPO, "tools", "xccl-topo", "examples", "two-hosts-8-devices.topo")

# (collective, algorithms, rank counts fitted, rank counts held out, sizes)
PLAN = [
    ("allreduce", ["ring", "direct", "recdoubling", "rabenseifner"], [2, 4, 8], [3, 16],
     [8, 4096, 262144, 2097152]),
    ("broadcast", ["chain", "direct", "tree"], [], [2, 4, 8], [8, 262144, 2097152]),
    ("reduce", ["chain", "direct", "tree"], [], [2, 4, 8], [8, 262144, 2097152]),
    ("allgather", ["ring", "direct"], [], [2, 4, 8], [8192, 262144, 2097152]),
    ("reducescatter", ["ring", "direct"], [], [2, 4, 8], [8192, 262144, 2097152]),
]
# The fitted constants, in the order of the feature columns (shm/reduce bytes become
# microseconds per byte; the parameters file wants GB/s).
COLUMNS = ["shm_hops", "messages", "shm_bytes", "reduce_bytes"]
COLORS = {"ring": "tab:purple", "direct": "tab:blue", "recdoubling": "tab:red",
          "rabenseifner": "tab:green", "hierarchical": "tab:orange", "twolevel": "tab:brown"}


def iterations(size, iters):
    """(timed, warm-up) operations. The warm-up moves at least 4 MiB per rank: a pair's ring
    pages are touched the first time a message lands on them (1 MiB rings), and 40 warm-up
    operations of 4 KiB left every timed one on fresh pages: 10.7 us instead of 2.0 for a
    2-rank direct allreduce (the first calibration's worst misses)."""
    timed = iters if size < (1 << 20) else max(5, iters // 4)
    if size < (64 << 10):
        timed *= 5
    return timed, max(timed, min(4000, (4 << 20) // size))


def measure(coll, alg, n, sizes, iters):
    """Microseconds per call, the better of out-of-place and in-place, per size."""
    out = {}
    for size in sizes:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.json")
            env = dict(os.environ, XCCL_ALGO=f"{coll}={alg}")
            it, warm = iterations(size, iters)
            cmd = [XCCL_TESTS, coll, "-p", str(n), "-z", "1", "-n", str(it), "-w", str(warm),
                   "-c", "0", "-J", path, "-T", "120", "-b", str(size), "-e", str(size)]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
            if p.returncode != 0:
                print(f"  {coll} {alg} n={n} {size} B: xccl-tests exit {p.returncode}: "
                      f"{p.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            out[size] = best_us(path)
    return out


def best_us(path):
    """xccl-tests -J: the better of out-of-place and in-place, us per call."""
    r = json.load(open(path))["results"][0]
    return min(r["out_of_place"]["time_us"], r["in_place"]["time_us"])


def simulate(coll, n, sizes, cores, params=None, extra=()):
    cmd = [XCCL_TOPO, "simulate", "-n", str(n), "--coll", coll, "--cores", str(cores),
           "--sizes", ",".join(str(s) for s in sizes), "--json", *extra]
    if params:
        cmd += ["--params", params]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


NET_PLAN = [  # (hosts, ranks per host, fitted?) x algorithms x sizes
    ((2, 1, True), (2, 2, True), (4, 1, False), (4, 2, False)),
    ["ring", "direct", "recdoubling", "hierarchical", "twolevel"],
    [8, 65536, 1 << 20],
]


def measure_hosts(nhosts, per_host, rate, alg, sizes, iters):
    """xccl-tests across namespace hosts, one process per rank: us per size (rank 0's -J)."""
    util.use_test_helpers()
    import netns
    out = {}
    n = nhosts * per_host
    with netns.hosts(nhosts, tag=f"s{nhosts}{per_host}") as hs:
        for h in hs:
            subprocess.run(["ip", "netns", "exec", h.name, "tc", "qdisc", "add", "dev", h.iface,
                            "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms"],
                           check=True)
        for size in sizes:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "x.json")
                port = util.free_port()
                it, warm = iterations(size, iters)
                procs = []
                for r in range(n):
                    h = hs[r // per_host]
                    env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n),
                               LOCAL_RANK=str(r % per_host), MASTER_ADDR=hs[0].addr,
                               MASTER_PORT=str(port), XCCL_ALGO=f"allreduce={alg}")
                    env.pop("XCCL_NODE_ID", None)  # the namespaces make the hosts
                    cmd = [XCCL_TESTS, "all_reduce", "-z", "1", "-n", str(it), "-w", str(warm),
                           "-c", "0", "-T", "120", "-b", str(size), "-e", str(size)]
                    if r == 0:
                        cmd += ["-J", path]
                    procs.append(h.popen(cmd, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, env=env))
                errs = [p.communicate(timeout=300)[1] for p in procs]
                if any(p.returncode != 0 for p in procs):
                    print(f"  {alg} {nhosts}x{per_host} {size} B failed: "
                          f"{[e.strip().splitlines()[-1:] for e in errs]}", flush=True)
                    continue
                out[size] = best_us(path)
    return out


def host_topo(rate_gbps, d):
    """A one-host system description with one NIC of the shaped rate, to copy per host."""
    path = os.path.join(d, "nshost.topo")
    with open(path, "w") as f:
        f.write(f"system host\nhost ns numa 1\nnic veth numa 0 gbps {rate_gbps}\n")
    return path


def read_params(path):
    vals = {}
    for line in open(path):
        line = line.split("#")[0].split()
        if len(line) == 2:
            vals[line[0]] = float(line[1])
    return vals


def net_main(a) -> int:
    util.use_test_helpers()
    import netns
    if netns.available():
        sys.exit(f"--net: {netns.available()}")
    base = read_params(a.params_in)
    m = re.fullmatch(r"([0-9.]+)(gbit|mbit)", a.rate.lower())
    if not m:
        sys.exit(f"--rate {a.rate}: give e.g. 1gbit or 500mbit (tc's units)")
    rate_gbps = float(m.group(1)) * (1.0 if m.group(2) == "gbit" else 1e-3)
    iters = 10 if a.quick else 20
    shapes, algs, sizes = NET_PLAN
    points = []
    d = tempfile.mkdtemp(prefix="bench_simulate_")  # the topo file serves both passes
    topo = host_topo(rate_gbps, d)
    for nhosts, per_host, fitted in shapes:
        n = nhosts * per_host
        cores = a.cores / nhosts  # the namespace hosts share this machine's cores
        extra = ("--topo-file", topo, "--hosts", str(nhosts), "--ranks-per-host",
                 str(per_host))
        sim = simulate("allreduce", n, sizes, cores, a.params_in, extra)
        for alg in algs:
            f0, _ = features(sim, sizes[0], alg)
            if f0 is None:
                continue  # the algorithm declines this shape (hierarchical on 1 per host)
            got = measure_hosts(nhosts, per_host, a.rate, alg, sizes, iters)
            print(f"measured {nhosts} hosts x {per_host} {alg:12s}: " +
                  "  ".join(f"{util.fmt_bytes(s)} {u:.1f} us" for s, u in got.items()),
                  flush=True)
            for size, us in got.items():
                f, selected = features(sim, size, alg)
                points.append({"hosts": nhosts, "per_host": per_host, "alg": alg,
                               "bytes": size, "measured_us": us, "features": f,
                               "selected": selected, "fit": fitted, "cores": cores,
                               "extra": extra})
    # The host-memory part of each time is known (base parameters); fit the rest.
    def rest(f):
        return (f["shm_hops"] * base["shm_alpha_us"] + f["messages"] * base["msg_us"] +
                f["shm_bytes"] / (base["shm_gbs"] * 1e3) +
                f["reduce_bytes"] / (base["reduce_gbs"] * 1e3))
    fit = [p for p in points if p["fit"]]
    A = np.array([[p["features"]["net_hops"], p["features"]["net_bytes"]] for p in fit])
    t = np.array([p["measured_us"] for p in fit])
    r = np.array([rest(p["features"]) for p in fit])
    coef, _ = nnls(A / t[:, None], 1 - r / t)
    params = dict(base)
    params["net_alpha_us"] = coef[0]
    params["net_gbs"] = 1e-3 / coef[1] if coef[1] > 0 else rate_gbps / 8
    with open(a.params_out, "w") as f:
        f.write(f"# host-memory constants from {a.params_in}; network constants fitted by "
                f"bench/bench_simulate.py --net ({a.rate} shaped veth, {len(fit)} points)\n")
        for k, v in params.items():
            f.write(f"{k} {v:.6g}\n")
    print(f"\nfitted: net_alpha_us {params['net_alpha_us']:.4g}  net_gbs "
          f"{params['net_gbs']:.4g} (the shaping rate: {rate_gbps / 8:.4g} GB/s)")
    for p in points:
        sim = simulate("allreduce", p["hosts"] * p["per_host"], [p["bytes"]], p["cores"],
                       a.params_out, p["extra"])
        p["predicted_us"] = next(x["us"] for x in sim["sizes"][0]["algorithms"]
                                 if x["name"] == p["alg"])
        p["error"] = p["predicted_us"] / p["measured_us"] - 1
        print(f"{p['hosts']} x {p['per_host']} {p['alg']:12s} {util.fmt_bytes(p['bytes']):>8s} "
              f"{p['measured_us']:10.1f} {p['predicted_us']:10.1f} {100 * p['error']:+6.0f}%  "
              f"{'fit' if p['fit'] else 'held out'}")
    summary = {}
    for label, sel in (("fit", fit), ("held_out", [p for p in points if not p["fit"]])):
        errs = np.abs([p["error"] for p in sel])
        if len(errs):
            summary[label] = {"points": len(sel), "median_abs_error": float(np.median(errs)),
                              "within_25pct": int((errs <= 0.25).sum())}
            print(f"{label}: {len(sel)} points, median |error| {100 * np.median(errs):.0f}%, "
                  f"{(errs <= 0.25).sum()} within 25%")
    for p in points:
        p.pop("extra")
    shutil.rmtree(d, ignore_errors=True)
    util.write_json(util.result_path(a.json, "bench_simulate_net"),
                    {"params": params, "summary": summary, "points": points})
    return 0


def features(sim, size, alg):
    for s in sim["sizes"]:
        if s["bytes"] == size:
            for a in s["algorithms"]:
                if a["name"] == alg:
                    return a["features"], s["selected"]
    return None, None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a CI sample)")
    ap.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--params-out", default=os.path.join(util.RESULTS, "sim_params.txt"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=os.path.join(util.BENCH, "simulate_scale.png"))
    ap.add_argument("--plot-only", metavar="PARAMS", help="only draw the plot with these "
                    "parameters (no measurement)")
    ap.add_argument("--net", action="store_true", help="fit the network constants on "
                    "namespace hosts (root)")
    ap.add_argument("--rate", default="1gbit", help="--net: tc tbf rate of each host's link")
    ap.add_argument("--params-in", default=os.path.join(util.BENCH, "simulate_params_2core.txt"),
                    help="--net: the host-memory constants")
    a = ap.parse_args()
    if a.net:
        return net_main(a)
    if a.plot_only:
        plot(a.plot, a.plot_only)
        return 0
    iters = 10 if a.quick else 40
    plan = PLAN if not a.quick else [("allreduce", ["ring", "direct"], [2, 4], [3], [8, 262144])]

    points = []  # one per (coll, alg, n, size) measured
    for coll, algs, fit_ns, check_ns, sizes in plan:
        for n in sorted(set(fit_ns + check_ns)):
            sim = simulate(coll, n, sizes, a.cores)
            for alg in algs:
                got = measure(coll, alg, n, sizes, iters)
                for size, us in got.items():
                    f, selected = features(sim, size, alg)
                    if f is None:
                        continue
                    points.append({"coll": coll, "alg": alg, "n": n, "bytes": size,
                                   "measured_us": us, "features": f, "selected": selected,
                                   "fit": n in fit_ns})
                print(f"measured {coll:9s} {alg:12s} n={n:2d}: " +
                      "  ".join(f"{util.fmt_bytes(s)} {u:.1f} us" for s, u in got.items()),
                      flush=True)

    fit = [p for p in points if p["fit"]]
    A = np.array([[p["features"][c] for c in COLUMNS] for p in fit])
    t = np.array([p["measured_us"] for p in fit])
    coef, _ = nnls(A / t[:, None], np.ones(len(t)))  # relative error, constants >= 0
    alpha, msg, us_per_byte_shm, us_per_byte_red = coef
    params = {"shm_alpha_us": alpha, "msg_us": msg,
              "shm_gbs": 1e-3 / us_per_byte_shm if us_per_byte_shm > 0 else 1e6,
              "reduce_gbs": 1e-3 / us_per_byte_red if us_per_byte_red > 0 else 1e6,
              "cores": a.cores}
    os.makedirs(os.path.dirname(a.params_out), exist_ok=True)
    with open(a.params_out, "w") as f:
        f.write(f"# fitted by bench/bench_simulate.py on {len(fit)} measured points, "
                f"{a.cores} cores\n")
        for k, v in params.items():
            f.write(f"{k} {v:.6g}\n")
    print("\nfitted:", "  ".join(f"{k} {v:.4g}" for k, v in params.items()))

    # Predicted vs measured, through the simulator itself with the fitted parameters.
    by_case = {}
    for p in points:
        by_case.setdefault((p["coll"], p["n"]), []).append(p)
    for (coll, n), ps in by_case.items():
        sim = simulate(coll, n, sorted({p["bytes"] for p in ps}), a.cores, a.params_out)
        for p in ps:
            for s in sim["sizes"]:
                if s["bytes"] != p["bytes"]:
                    continue
                for alg in s["algorithms"]:
                    if alg["name"] == p["alg"]:
                        p["predicted_us"] = alg["us"]
        for size in {p["bytes"] for p in ps}:
            at = [p for p in ps if p["bytes"] == size]
            fastest = min(at, key=lambda p: p["measured_us"])["alg"]
            for p in at:
                p["measured_fastest"] = fastest
    print(f"\n{'':10s} {'alg':12s} {'n':>3s} {'size':>8s} {'measured':>10s} {'predicted':>10s} "
          f"{'error':>7s}  set")
    for p in points:
        p["error"] = p["predicted_us"] / p["measured_us"] - 1
        print(f"{p['coll']:10s} {p['alg']:12s} {p['n']:3d} {util.fmt_bytes(p['bytes']):>8s} "
              f"{p['measured_us']:10.1f} {p['predicted_us']:10.1f} {100 * p['error']:+6.0f}%  "
              f"{'fit' if p['fit'] else 'held out'}")
    summary = {}
    for label, sel in (("fit", [p for p in points if p["fit"]]),
                       ("held_out", [p for p in points if not p["fit"]])):
        if not sel:
            continue
        errs = np.abs([p["error"] for p in sel])
        summary[label] = {"points": len(sel), "median_abs_error": float(np.median(errs)),
                          "within_25pct": int((errs <= 0.25).sum())}
        print(f"{label}: {len(sel)} points, median |error| {100 * np.median(errs):.0f}%, "
              f"{(errs <= 0.25).sum()} within 25%")
    picks = {(p["coll"], p["n"], p["bytes"]): (p["selected"], p["measured_fastest"])
             for p in points}
    agree = sum(1 for s, m in picks.values() if s == m)
    print(f"selector's pick = measured fastest (among the forced algorithms) in {agree} of "
          f"{len(picks)} cases")
    summary["selector_agrees"] = [agree, len(picks)]

    if a.plot and not a.quick:
        plot(a.plot, a.params_out)
    util.write_json(util.result_path(a.json, "bench_simulate"),
                    {"params": params, "summary": summary, "points": points})
    return 0


def plot(path, params):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # The cluster's own NICs set the network rate: keep the fitted latencies, drop a fitted
    # rate (that was the shaped test link's).
    vals = read_params(params)
    vals["net_gbs"] = 0
    d = tempfile.mkdtemp(prefix="bench_simulate_plot_")
    params = os.path.join(d, "params.txt")
    with open(params, "w") as f:
        f.writelines(f"{k} {v:.6g}\n" for k, v in vals.items())
    ns = [64, 256, 1024, 4096, 16384]
    sizes = [8, 1 << 20, 64 << 20]
    fig, axes = plt.subplots(1, len(sizes), figsize=(15, 4.5))
    for ax, size in zip(axes, sizes):
        series, picks = {}, []
        for n in ns:
            sim = simulate("allreduce", n, [size], 0, params,
                           ("--topo-file", CLUSTER, "--hosts", str(n // 8)))
            s = sim["sizes"][0]
            for alg in s["algorithms"]:
                series.setdefault(alg["name"], {})[n] = alg["us"]
            picks.append((n, next(x["us"] for x in s["algorithms"] if x["name"] == s["selected"])))
        for name, pts in sorted(series.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", label=name, color=COLORS[name])
        ax.scatter([p[0] for p in picks], [p[1] for p in picks], s=160, facecolors="none",
                   edgecolors="black", linewidths=1.5, label="selector's pick", zorder=5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"allreduce {util.fmt_bytes(size)}")
        ax.set_xlabel("ranks (hosts of 8 devices, 2 x 100 Gbit/s NICs)")
        ax.set_ylabel("predicted time (us)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("xccl-topo simulate: predicted allreduce time per algorithm (constants fitted "
                 "on this host and on namespace hosts; the cluster's NIC rate)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    shutil.rmtree(d, ignore_errors=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
