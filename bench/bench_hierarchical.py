#!/usr/bin/env python3
"""Hierarchical allreduce vs the flat ring (and gloo) across hosts made of network
namespaces on one bridge, each host's link shaped with tc (a token bucket on the host's
egress, default 1 Gbit/s). Root only; needs iproute2.

H hosts x L ranks (default 2 x 2 and 3 x 2). All ranks run in one job: a gloo world, one
xccl group; XCCL_ALGO is switched between the phases (allreduce=ring, then
allreduce=hierarchical; the selector reads it per call and nothing is in flight between
phases). Per size: the median of a few timed calls after one warm-up.

busbw = bytes x 2(n-1)/n / time (NCCL's), n = H x L. What crosses each host's link:
  flat ring:     2(n-1)/n of the buffer   (one ring edge leaves each host)
  hierarchical:  2(H-1)/H of the buffer   (L column rings, 1/L of the buffer each)
so the most hierarchical can gain is (n-1)/n / ((H-1)/H): 1.5x for 2 x 2, 1.25x for 3 x 2.

Usage: python bench/bench_hierarchical.py [--rate 1gbit] [--shapes 2x2 3x2] [--json PATH]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
util.use_test_helpers()
import netns  # noqa: E402  (the tests' namespace helper)

WORKER = r"""
import json, os, statistics, sys, time, torch, torch.distributed as dist, torch_xccl
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")
xg = dist.new_group(backend="xccl")
out = {}
for nbytes in json.loads(sys.argv[1]):
    t = torch.ones(max(1, nbytes // 4))
    iters = 3 if nbytes >= (16 << 20) else 8
    for name, algo, g in (("xccl ring", "allreduce=ring", xg),
                          ("xccl hierarchical", "allreduce=hierarchical", xg),
                          ("gloo", "", None)):
        os.environ["XCCL_ALGO"] = algo  # nothing is in flight: the previous call completed
        dist.all_reduce(t, group=g)     # warm-up (and connection set-up)
        times = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t, group=g)
            times.append(time.perf_counter() - t0)
        # every call summed: ones * world^(calls), exact in float32 for these shapes
        want = float(world ** (iters + 1))
        assert t[0].item() == want and t[-1].item() == want, (name, t[0].item(), want)
        t.fill_(1.0)
        out.setdefault(name, {})[nbytes] = statistics.median(times)
if rank == 0:
    print("RESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
"""


def run_shape(nhosts, per_host, rate, sizes, port):
    with netns.hosts(nhosts, tag=f"h{nhosts}") as hs:
        if rate:
            for h in hs:
                subprocess.run(["ip", "netns", "exec", h.name, "tc", "qdisc", "add", "dev", h.iface,
                                "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms"],
                               check=True)
        procs = []
        n = nhosts * per_host
        for r in range(n):
            h = hs[r // per_host]
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r % per_host),
                       MASTER_ADDR=hs[0].addr, MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                       GLOO_SOCKET_IFNAME=h.iface)
            env.pop("XCCL_NODE_ID", None)  # the namespaces make the hosts
            env.pop("XCCL_ALGO", None)
            procs.append(h.popen([sys.executable, "-c", WORKER, json.dumps(sizes)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=env))
        try:
            outs = [p.communicate(timeout=1200)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    for p, o in zip(procs, outs):
        if p.returncode != 0:
            sys.exit(f"a rank failed (rc {p.returncode}):\n{o[-3000:]}")
    line = next(ln for ln in outs[0].splitlines() if ln.startswith("RESULT "))
    return {k: {int(s): v for s, v in d.items()} for k, d in json.loads(line[7:]).items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", default="1gbit", help="tc tbf rate per host ('' = bare)")
    ap.add_argument("--shapes", nargs="+", default=["2x2", "3x2"], help="HOSTSxRANKS")
    ap.add_argument("--sizes", nargs="+", type=int, default=[1 << 20, 64 << 20])
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    if netns.available():
        sys.exit(netns.available())
    results = {}
    for i, shape in enumerate(a.shapes):
        nh, per = (int(x) for x in shape.split("x"))
        res = run_shape(nh, per, a.rate, a.sizes, 29700 + i)
        n = nh * per
        limit = ((n - 1) / n) / ((nh - 1) / nh)
        print(f"\n{nh} hosts x {per} ranks, {'tbf ' + a.rate + ' per host' if a.rate else 'bare veth'}"
              f" (hierarchical's limit {limit:.2f}x the ring)")
        print(f"{'size':>10} {'system':>18} {'time ms':>9} {'busbw GB/s':>11}")
        for size in a.sizes:
            for name in ("xccl ring", "xccl hierarchical", "gloo"):
                t = res[name][size]
                busbw = size * 2 * (n - 1) / n / t / 1e9
                print(f"{size:>10} {name:>18} {t * 1e3:>9.1f} {busbw:>11.3f}")
            ratio = res["xccl ring"][size] / res["xccl hierarchical"][size]
            print(f"{size:>10} {'hier / ring':>18} {ratio:>9.2f}x")
        results[shape] = res
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rate": a.rate, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
