#!/usr/bin/env python3
"""Communicator creation across hosts: the bootstrap tree against rank 0 gathering through the
store, on hosts made of network namespaces whose links are shaped to a rate.

For each shape (hosts x ranks per host) and each way of exchanging the ranks' records
(XCCL_BOOTSTRAP_FANOUT=8: the tree of the ranks' own bootstrap services, bootstrap/tree.cc;
=0: rank 0 reads every record from the store and every rank reads the whole list back),
alternated --repeats times, one `xccl-tests all_reduce` process per rank is launched in its
host's namespace (rank 0's process holds the unique-id store, so the store's host is host 0),
and the run reports:
  - creation: the slowest rank's "ready ... in N ms" and the median rank's (XCCL_DEBUG=INFO);
  - the store's load: requests answered and bytes sent by the unique-id store server (its
    INFO line at retirement), i.e. what leaves host 0 for the rendezvous.
Each host's egress is shaped with `tc tbf` to --rate (as bench_simulate.py --net does), so the
store host's link is the bottleneck a real cluster's rendezvous host has.

  sudo python3 bench/bench_bootstrap.py [--shapes 8x8 8x32] [--rate 1gbit] [--repeats 3]
                                        [--json PATH]

Needs root (namespaces, tc) and build/tools/xccl-tests/xccl-tests.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402

XCCL_TESTS = os.path.join(util.REPO, "build", "tools", "xccl-tests", "xccl-tests")
READY = re.compile(r"ready on .* in (\d+) ms")
STORE = re.compile(r"it answered (\d+) requests \((\d+) for keys not there yet\) and sent (\d+) bytes")


def launch(hs, per_host, fanout, timeout):
    """One creation (and one 8-byte allreduce) of hosts x per_host ranks; its figures."""
    n = len(hs) * per_host
    port = util.free_port()
    procs = []
    for r in range(n):
        h = hs[r // per_host]
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r % per_host),
                   MASTER_ADDR=hs[0].addr, MASTER_PORT=str(port), XCCL_DEBUG="INFO",
                   XCCL_DEBUG_SUBSYS="INIT,BOOT", XCCL_BOOTSTRAP_FANOUT=str(fanout))
        env.pop("XCCL_NODE_ID", None)  # the namespaces make the hosts
        cmd = [XCCL_TESTS, "all_reduce", "-z", "1", "-n", "1", "-w", "0", "-b", "8", "-e", "8",
               "-T", str(timeout)]
        procs.append(h.popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=env))
    errs = [p.communicate(timeout=timeout + 60)[1] for p in procs]
    if any(p.returncode != 0 for p in procs):
        bad = [(r, e.strip().splitlines()[-1:]) for r, (p, e) in enumerate(zip(procs, errs))
               if p.returncode != 0]
        raise RuntimeError(f"{len(bad)} ranks failed, first: {bad[0]}")
    ready = sorted(int(m) for e in errs for m in READY.findall(e))
    store = [STORE.search(e) for e in errs]
    store = next(m for m in store if m)
    return {"ranks": n, "ready_max_ms": ready[-1], "ready_median_ms": statistics.median(ready),
            "store_requests": int(store.group(1)), "store_misses": int(store.group(2)),
            "store_bytes": int(store.group(3)), "ready_lines": len(ready)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["8x8", "8x32"],
                    help="hosts x ranks per host (default: 8x8 8x32)")
    ap.add_argument("--rate", default="1gbit", help="each host's egress (tc tbf), default 1gbit")
    ap.add_argument("--fanouts", nargs="+", type=int, default=[8, 0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=120, help="seconds per launch")
    ap.add_argument("--json", help="results file (default bench/results/bootstrap.json)")
    a = ap.parse_args()
    util.use_test_helpers()
    import netns
    why = netns.available()
    if why:
        sys.exit(f"bench_bootstrap: {why}")
    if not os.access(XCCL_TESTS, os.X_OK):
        sys.exit(f"bench_bootstrap: {XCCL_TESTS} is not built (cmake --build build)")
    results = []
    for shape in a.shapes:
        nh, per = (int(x) for x in shape.split("x"))
        with netns.hosts(nh, tag="b") as hs:
            for h in hs:
                subprocess.run(["ip", "netns", "exec", h.name, "tc", "qdisc", "add", "dev", h.iface,
                                "root", "tbf", "rate", a.rate, "burst", "256kb", "latency",
                                "50ms"], check=True)
            for rep in range(a.repeats):
                for fanout in a.fanouts:
                    row = dict(launch(hs, per, fanout, a.timeout), hosts=nh, per_host=per,
                               fanout=fanout, rate=a.rate, repeat=rep)
                    results.append(row)
                    print(f"{nh}x{per} fanout {fanout}: ready max {row['ready_max_ms']} ms "
                          f"(median {row['ready_median_ms']}), store {row['store_requests']} "
                          f"requests, {util.fmt_bytes(row['store_bytes'])} sent", flush=True)
    print("\nshape | fanout | ready, slowest rank (median of repeats) | store requests | store bytes")
    for shape in a.shapes:
        nh, per = (int(x) for x in shape.split("x"))
        for fanout in a.fanouts:
            rows = [r for r in results if (r["hosts"], r["per_host"], r["fanout"]) == (nh, per, fanout)]
            print(f"{shape} | {fanout} | {statistics.median(r['ready_max_ms'] for r in rows):.0f} ms "
                  f"({', '.join(str(r['ready_max_ms']) for r in rows)}) | "
                  f"{rows[0]['store_requests']} | {util.fmt_bytes(rows[0]['store_bytes'])}")
    path = util.result_path(a.json, "bootstrap.json")
    util.write_json(path, {"rate": a.rate, "runs": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
