#!/usr/bin/env python3
"""allreduce between two hosts made of network namespaces: xccl (1 and 4 sockets per peer;
through network plugins: the built-in socket table, libfabric) vs gloo vs iperf3, on the bare veth link and shaped with tc (a token-bucket rate limit on
each side's egress; netem, for delay, is not in every kernel: this machine's lacks it). Root
only.

One rank per host, so every byte crosses the link (TCP). Per size, turns in which every
system makes one call (each to completion, after a barrier), the order rotating turn by turn;
the median of each system's calls, and the median of each call's ratio to the xccl_1sock call
of its turn (single calls here spread by +-30 %, pairs much less); busbw = bytes x 2(n-1)/n / time = bytes / time for 2 ranks, the
same unit as iperf3's goodput. iperf3 -P 4 (four flows, as the multi-socket transport uses)
and -P 1 are measured on the same link just before.

Usage: python bench/bench_two_hosts.py [--rate 1gbit] [--plugins socket,libfabric] [--json PATH]
(a plugin that is not installed next to libxccl is left out, said on stderr)
Needs iperf3 (apt-get install iperf3) and iproute2.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
util.use_test_helpers()
import netns  # noqa: E402  (the tests' namespace helper)

SIZES = [8, 1 << 20, 64 << 20]

WORKER = r"""
import json, os, statistics, sys, time, torch, torch.distributed as dist, torch_xccl
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
groups = {}
# both read when a group's communicator connects
os.environ["XCCL_NET_PLUGIN"] = "none"
for n in (1, 4):
    os.environ["XCCL_NSOCKS"] = str(n)
    groups[f"xccl_{n}sock"] = dist.new_group(backend="xccl")
os.environ["XCCL_NSOCKS"] = "1"
# the same system twice: how far two identical systems differ by this method (its floor)
groups["xccl_1sock_again"] = dist.new_group(backend="xccl")
for plugin in json.loads(sys.argv[2]):
    os.environ["XCCL_NET_PLUGIN"] = plugin
    groups[f"xccl_net_{plugin}"] = dist.new_group(backend="xccl")
groups["gloo"] = dist.group.WORLD
out, ratios = {}, {}
names = list(groups)
for nbytes in json.loads(sys.argv[1]):
    t = torch.ones(max(1, nbytes // 4))
    calls = int(os.environ.get("BENCH_CALLS", "0")) or (200 if nbytes < (1 << 20) else 60)
    times = {name: [] for name in names}
    for g in groups.values():
        dist.all_reduce(t, group=g)  # warm-up (and connection set-up)
    # Every system once per turn, the order rotating: a slow spell of this shared machine
    # (two cores for two ranks and the kernel's network work) lands on all of them alike,
    # and each call has a partner from the same turn to be compared with.
    for i in range(calls):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            dist.barrier(group=groups["gloo"])
            t0 = time.perf_counter()
            dist.all_reduce(t, group=groups[name])
            times[name].append(time.perf_counter() - t0)
    for name in names:
        out.setdefault(name, {})[nbytes] = statistics.median(times[name])
        r = sorted(b / a for a, b in zip(times["xccl_1sock"], times[name]))
        ratios.setdefault(name, {})[nbytes] = [r[len(r) // 4], statistics.median(r),
                                               r[3 * len(r) // 4]]
if rank == 0:
    print("RESULT " + json.dumps({"median_s": out, "ratio": ratios}), flush=True)
dist.destroy_process_group()
"""


def iperf(hosts, flows, seconds=4):
    server = hosts[1].popen(["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        p = hosts[0].popen(["iperf3", "-c", hosts[1].addr, "-P", str(flows), "-t", str(seconds),
                            "-J"], stdout=subprocess.PIPE, text=True)
        out, _ = p.communicate(timeout=seconds + 30)
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8 / 1e9  # GB/s
    finally:
        server.kill()


def run_case(hosts, port, plugins):
    procs = []
    for r, h in enumerate(hosts):
        # gloo resolves the hostname by default (loopback in a namespace): name its link
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR=hosts[0].addr,
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=h.iface)
        env.pop("XCCL_NODE_ID", None)
        procs.append(h.popen([sys.executable, "-c", WORKER, json.dumps(SIZES), json.dumps(plugins)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
    try:
        outs = [p.communicate(timeout=900)[0] for p in procs]
    finally:
        for p in procs:  # one rank failing leaves the other waiting: never a hang
            if p.poll() is None:
                p.kill()
                p.wait(5)
    for p, o in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(o[-3000:])
    line = [ln for ln in outs[0].splitlines() if ln.startswith("RESULT ")][0]
    return json.loads(line[len("RESULT "):])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", help="tc tbf rate on each side's link, e.g. 1gbit (default: bare veth)")
    ap.add_argument("--plugins", default="socket,libfabric",
                    help="network plugins to compare with the TCP transport (XCCL_NET_PLUGIN)")
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch_xccl
    lib = os.path.join(os.path.dirname(torch_xccl.__file__), "lib")
    plugins = []
    for p in filter(None, a.plugins.split(",")):
        if p == "socket" or os.path.exists(os.path.join(lib, f"libxccl-net-{p}.so")):
            plugins.append(p)
        else:
            print(f"bench_two_hosts: plugin {p} not installed in {lib}: left out", file=sys.stderr)
    why = netns.available()
    if why:
        sys.exit(f"bench_two_hosts: {why}")
    with netns.two_hosts("B") as hosts:
        if a.rate:
            for h in hosts:
                subprocess.run(["ip", "netns", "exec", h.name, "tc", "qdisc", "add", "dev", h.iface,
                                "root", "tbf", "rate", a.rate, "burst", "256kb", "latency", "50ms"],
                               check=True)
        link = {"iperf3_P1": iperf(hosts, 1), "iperf3_P4": iperf(hosts, 4)}
        res = run_case(hosts, 29733, plugins)
    shape = f"tc tbf rate {a.rate} each way" if a.rate else "bare veth"
    print(f"# two hosts (network namespaces + veth), {shape}; 1 rank per host, float32 allreduce")
    print(f"# iperf3 -P 1: {link['iperf3_P1']:.3f} GB/s   iperf3 -P 4: {link['iperf3_P4']:.3f} GB/s")
    med, ratio = res["median_s"], res["ratio"]
    print(f"{'size':>8} " + " ".join(f"{n + ' ms':>14} {'GB/s':>7}" for n in med))
    for nbytes in SIZES:
        cells = []
        for name in med:
            t = med[name][str(nbytes)]
            cells.append(f"{t * 1e3:14.3f} {nbytes / t / 1e9:7.3f}")
        print(f"{nbytes:>8} " + " ".join(cells))
    print("# each call / the xccl_1sock call of its turn: median [quartiles]")
    for nbytes in SIZES:
        cells = [f"{n} {r[1]:.3f} [{r[0]:.2f}-{r[2]:.2f}]"
                 for n, r in ((n, ratio[n][str(nbytes)]) for n in ratio) if n != "xccl_1sock"]
        print(f"{nbytes:>8}  " + "  ".join(cells))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"shape": shape, "link": link, "allreduce_s": med, "ratio_to_xccl_1sock": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
