"""Bad launches end with a clear error on every process that started, within the timeout,
never a hang: an unreachable master, a wrong interface name, a node that never comes. Each
process has a hard timeout. (The master's port taken by a process that accepts and never
answers hangs inside torch's TCPStore client before xccl runs: not covered here.)"""
import os
import subprocess
import sys
import time

import pytest

import netns
from harness import communicate_all, free_port

INIT = """
import datetime, os, sys, time, torch, torch.distributed as dist, torch_xccl
t0 = time.monotonic()
try:
    dist.init_process_group("xccl", timeout=datetime.timedelta(seconds=float(os.environ["T"])))
    t = torch.ones(2)
    dist.all_reduce(t)  # the host communicator connects here at the latest
    print("OK", t.tolist(), flush=True)
except Exception as e:  # noqa: BLE001
    print(f"ERROR after {time.monotonic() - t0:.1f}s: {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
"""


def start(rank, world, port, addr="127.0.0.1", prefix=(), **env):
    e = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR=addr,
             MASTER_PORT=str(port), T="8", OMP_NUM_THREADS="1")
    e.update(env)
    return subprocess.Popen(list(prefix) + [sys.executable, "-c", INIT], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=e)


@pytest.mark.timeout(90)
def test_wrong_interface_name_is_named_on_every_rank():
    port = free_port()
    outs = communicate_all([start(r, 2, port, XCCL_SOCKET_IFNAME="=no-such-if9")
                            for r in range(2)], 60)
    for rc, text in outs:
        assert rc == 3, text
        assert "XCCL_SOCKET_IFNAME==no-such-if9" in text and "up IPv4 interfaces:" in text, text


@pytest.mark.timeout(90)
def test_a_node_that_never_comes_times_out_with_an_error():
    t0 = time.monotonic()
    (rc, text), = communicate_all([start(0, 2, free_port())], 60)
    assert rc == 3 and "ERROR" in text, text
    assert time.monotonic() - t0 < 60, text


@pytest.mark.skipif(bool(netns.available()), reason=netns.available() or "ok")
@pytest.mark.timeout(90)
def test_unreachable_master():
    """Node B's master address exists (in node A's namespace) but B has no route to it."""
    with netns.two_hosts("U") as hosts:
        subprocess.run(["ip", "-n", hosts[1].name, "link", "set", hosts[1].iface, "down"],
                       check=True)
        (rc, text), = communicate_all([start(1, 2, 29644, addr=hosts[0].addr,
                                             prefix=["ip", "netns", "exec", hosts[1].name])], 60)
    assert rc == 3 and "ERROR" in text, text
