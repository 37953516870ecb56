"""Heartbeats through torch: a link cut with no reset (the switch port taken down, or a
qdisc that drops every packet, our stand-in for `tc netem loss 100%`, which this kernel
lacks) and a stopped rank (SIGSTOP) make every surviving rank raise within
XCCL_HEARTBEAT_MS + XCCL_HEARTBEAT_TIMEOUT_MS, not at the group timeout.

The cut-link cases need root and iproute2 (hosts made of network namespaces, tests/python/
netns.py) and skip without them. Every process has a hard timeout.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

import netns
from harness import communicate_all, free_port

# Each rank all-reduces in a loop, saying "STEP <k>" after each step, until an operation
# raises; then it prints how long the failing operation took and the error.
LOOP = r"""
import datetime, os, sys, time, torch, torch.distributed as dist, torch_xccl
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("xccl", timeout=datetime.timedelta(seconds=120))
t = torch.ones(1 << 16)
k = 0
while True:
    t0 = time.monotonic()
    try:
        t.fill_(1.0)
        dist.all_reduce(t)
        assert t[0].item() == world, t[0].item()
    except Exception as e:
        msg = str(e).replace("\n", " ")
        print(f"RAISED after {time.monotonic() - t0:.2f} s: {msg}", flush=True)
        os._exit(3)
    k += 1
    print(f"STEP {k}", flush=True)
    time.sleep(0.05)
"""

HB = {"XCCL_HEARTBEAT_MS": "200", "XCCL_HEARTBEAT_TIMEOUT_MS": "2000"}
BOUND_S = 0.2 + 2.0 + 4.0  # interval + timeout + slack for a loaded 2-core machine


def start_rank(popen, rank, world, master, port, extra=None):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR=master,
               MASTER_PORT=str(port), OMP_NUM_THREADS="1", **HB, **(extra or {}))
    env.pop("XCCL_NODE_ID", None)
    return popen([sys.executable, "-u", "-c", LOOP], stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT, text=True, env=env)


def wait_steps(procs, steps, timeout=60):
    """Reads each process's output until it printed STEP <steps>; returns what was read."""
    seen = ["" for _ in procs]
    until = time.monotonic() + timeout
    for i, p in enumerate(procs):
        while f"STEP {steps}\n" not in seen[i]:
            assert time.monotonic() < until, f"rank {i} never reached step {steps}: {seen[i]}"
            line = p.stdout.readline()
            assert line, f"rank {i} ended early: {seen[i]}"
            seen[i] += line
    return seen


def raised_within(text, bound):
    m = re.search(r"RAISED after ([0-9.]+) s: (.*)", text)
    assert m, text[-3000:]
    assert float(m.group(1)) < bound, f"raised only after {m.group(1)} s: {m.group(2)}"
    return m.group(2)


@pytest.mark.skipif(bool(netns.available()), reason=netns.available() or "ok")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("cut", ["port-down", "drop-all"])
def test_cut_link_makes_both_hosts_raise(cut):
    with netns.hosts(2, tag="H" + cut[0]) as hs:
        port = 29741 if cut == "port-down" else 29742
        procs = [start_rank(hs[r].popen, r, 2, hs[0].addr, port) for r in range(2)]
        try:
            wait_steps(procs, 5)
            sw = hs[0].name[:-1] + "sw"  # netns.hosts names the switch <base>sw
            if cut == "port-down":   # the cable pulled at the switch: no reset reaches anyone
                subprocess.run(["ip", "-n", sw, "link", "set", "sb0", "down"], check=True)
            else:  # every packet from host b dropped (tbf whose bucket holds no packet)
                subprocess.run(["ip", "netns", "exec", hs[1].name, "tc", "qdisc", "add", "dev",
                                hs[1].iface, "root", "tbf", "rate", "8bit", "burst", "1",
                                "limit", "1"], check=True)
            outs = communicate_all(procs, 60)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    for r, (rc, text) in enumerate(outs):
        assert rc == 3, f"rank {r} did not raise (rc {rc}): {text[-3000:]}"
        why = raised_within(text, BOUND_S)
        assert "went silent" in why or "failed" in why, why


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_stopped_rank_makes_the_others_raise(transport):
    port = free_port()
    extra = {"XCCL_SHM_DISABLE": "1"} if transport == "tcp" else {}
    procs = [start_rank(subprocess.Popen, r, 3, "127.0.0.1", port, extra) for r in range(3)]
    try:
        wait_steps(procs, 5)
        procs[2].send_signal(signal.SIGSTOP)
        outs = communicate_all(procs[:2], 60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.send_signal(signal.SIGCONT)
                p.wait(10)
    for r, (rc, text) in enumerate(outs):
        assert rc == 3, f"rank {r} did not raise (rc {rc}): {text[-3000:]}"
        why = raised_within(text, BOUND_S)
        assert "rank 2" in why, why
