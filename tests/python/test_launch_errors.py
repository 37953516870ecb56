"""Bad launches end with a clear error on every process that started, within the timeout,
never a hang: an unreachable master, a wrong interface name, a node that never comes, the
master's port in use. Each process has a hard timeout.

The master's port in use, measured with torch 2.13.0+cpu, init_process_group(timeout=8 s)
on 2 ranks, each under `timeout 60`:

- rank 0 hosts torch's TCPStore: whoever holds the port, it fails at once (exit 3 about 3 s
  after start, imports included): DistNetworkError "The server socket has failed to listen
  on any local network address. port: P, ... EADDRINUSE". Tested.
- rank 1 is a TCPStore client of whatever holds the port:
  - another PyTorch job's TCPStore (the usual collision; 29500 is everyone's default): it
    joins that store; xccl's set-up gives up waiting for rank 0 after the group's timeout
    (exit 3 after ~11 s: "xccl init: rank 1 of 2 ...: operation timed out: ... store get
    'xccl/secret' timed out after 8000 ms"). Tested; also torchrun's agents, which end after
    their rendezvous timeout (static: --rdzv-conf timeout=N, 600 s by default; c10d:
    join_timeout=N, with is_host=true on node 0, else that agent falls back to being a
    client of the other store and the job silently runs on it).
  - any other service (a listener that never accepts, one that accepts and never answers,
    an HTTP server waiting for a newline): it hangs (killed by `timeout` at 60 s) inside
    torch, before any xccl code runs: the TCPStore constructor's TCPStore::ping() blocks in
    recv() for the 4-byte reply, on a socket with no receive timeout (gdb; strace shows the
    connect bounded by the 8 s, the recv not). Neither the group's timeout nor torchrun's
    read_timeout/join_timeout bounds it (torchrun static and c10d node 1: killed at 60 s
    too). Not tested: nothing of ours runs. Workaround (docs/LAUNCH.md, Troubleshooting): a
    free MASTER_PORT; the scheduler's time limit or a `timeout` around the launch.
"""
import datetime
import os
import socket
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

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


# ---------------------------------------------------------------- the master's port in use

WORKER = """
import datetime, torch, torch.distributed as dist, torch_xccl
dist.init_process_group("xccl", timeout=datetime.timedelta(seconds=8))
t = torch.ones(2)
dist.all_reduce(t)
print("OK", t.tolist(), flush=True)
"""


def another_jobs_store(port):
    """A TCPStore server on `port`, as another PyTorch job's master would hold it."""
    return dist.TCPStore("127.0.0.1", port, 2, True, timeout=datetime.timedelta(seconds=120),
                         wait_for_workers=False)


@pytest.mark.timeout(90)
def test_port_held_by_another_service_is_named_by_rank_0():
    """A listener that is not ours holds MASTER_PORT: rank 0, the store's host, says so at
    once. (The other ranks would wait inside torch's TCPStore client: module docstring.)"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", 0))
        s.listen(8)
        port = s.getsockname()[1]
        t0 = time.monotonic()
        (rc, text), = communicate_all([start(0, 2, port)], 60)
    assert rc == 3 and "EADDRINUSE" in text and f"port: {port}" in text, text
    assert time.monotonic() - t0 < 30, text


@pytest.mark.timeout(90)
def test_port_held_by_another_jobs_store_errors_on_every_rank():
    """Another job's TCPStore holds MASTER_PORT: rank 0 names EADDRINUSE at once, rank 1
    (which joined the other store) times out waiting for rank 0: an error, not a hang."""
    port = free_port()
    store = another_jobs_store(port)
    try:
        t0 = time.monotonic()
        outs = communicate_all([start(r, 2, port) for r in range(2)], 60)
        took = time.monotonic() - t0
    finally:
        del store
    (rc0, text0), (rc1, text1) = outs
    assert rc0 == 3 and "EADDRINUSE" in text0 and f"port: {port}" in text0, text0
    assert rc1 == 3 and "ERROR" in text1 and "timed out" in text1, text1
    assert took < 60, outs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rdzv", ["static", "c10d"])
def test_torchrun_on_a_port_held_by_another_jobs_store(rdzv, tmp_path):
    """torchrun, 2 nodes, the port held by another job's store: node 0's agent names
    EADDRINUSE, node 1's gives up after the rendezvous timeout it was given (static:
    --rdzv-conf timeout; c10d: join_timeout, with is_host=true on node 0 so that it does not
    fall back to being a client of the other store)."""
    port = free_port()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    store = another_jobs_store(port)
    procs = []
    try:
        t0 = time.monotonic()
        for node in range(2):
            if rdzv == "static":
                how = ["--master-addr", "127.0.0.1", "--master-port", str(port),
                       "--node-rank", str(node), "--rdzv-conf", "timeout=15"]
            else:
                how = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                       "--rdzv-id", "portjob", "--rdzv-conf",
                       f"is_host={'true' if node == 0 else 'false'},join_timeout=15,"
                       "read_timeout=15"]
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                 "--nproc-per-node", "1"] + how + [str(script)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                env=dict(os.environ, OMP_NUM_THREADS="1")))
        outs = communicate_all(procs, 90)
        took = time.monotonic() - t0
    finally:
        del store
    (rc0, text0), (rc1, text1) = outs
    assert rc0 != 0 and "EADDRINUSE" in text0 and f"port: {port}" in text0, text0[-3000:]
    assert rc1 != 0 and ("DistStoreError: wait timeout" in text1
                         or "RendezvousTimeoutError" in text1), text1[-3000:]
    assert took < 90, outs
