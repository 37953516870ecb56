"""Blocking host collectives run on the calling thread (XCCL_STREAM_CALLER).

torch passes asyncOp=False for a collective it waits for at once (dist.all_reduce(t) without
async_op); on cpu tensors the backend then runs it on the calling thread instead of handing
it to libxccl's progress thread and waiting. What is checked here is *which thread ran each
collective*, read from libxccl's own trace (XCCL_DEBUG=TRACE prints the thread id of the
thread that runs each collective), and that both paths give the same results.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from harness import communicate_all, free_port

SCRIPT = r"""
import os, threading, torch, torch.distributed as dist, torch_xccl
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("xccl")
print(f"TID {threading.get_native_id()}", flush=True)
t = torch.ones(1000) * (rank + 1)
dist.all_reduce(t)                       # collective #1: blocking
assert torch.all(t == world * (world + 1) / 2), t[:4]
w = dist.all_reduce(t, async_op=True)    # collective #2: asynchronous
w.wait()
assert torch.all(t == world * world * (world + 1) / 2), t[:4]
dist.barrier()                           # collective #3: blocking
big = torch.arange(300000, dtype=torch.float64) + rank
dist.all_reduce(big, op=dist.ReduceOp.MAX)   # collective #4: blocking, ring
assert torch.equal(big, torch.arange(300000, dtype=torch.float64) + world - 1)
print("CHECKED", flush=True)
dist.destroy_process_group()
"""


def run_pair(extra_env):
    port = free_port()
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", XCCL_DEBUG="TRACE",
                   XCCL_DEBUG_SUBSYS="COLL", **extra_env)
        procs.append(subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, env=env))
    outs = communicate_all(procs, 100)
    for rc, text in outs:
        assert rc == 0 and "CHECKED" in text, text[-3000:]
    return [text for _, text in outs]


def threads_of(text):
    """{collective number: thread id that ran it}, and the rank's main thread id."""
    main = int(re.search(r"^TID (\d+)$", text, re.M).group(1))
    ran = {}
    for m in re.finditer(r"^\S+:\d+:(\d+) .*XCCL TRACE (\w+) #(\d+) count", text, re.M):
        ran.setdefault(int(m.group(3)), (m.group(2), int(m.group(1))))
    return main, ran


@pytest.mark.timeout(120)
def test_blocking_collectives_run_on_the_calling_thread():
    for text in run_pair({}):
        main, ran = threads_of(text)
        assert set(ran) >= {1, 2, 3, 4}, text[-3000:]
        assert ran[1] == ("allreduce", main), ran
        assert ran[2][0] == "allreduce" and ran[2][1] != main, ran  # async: progress thread
        assert ran[3] == ("barrier", main), ran
        assert ran[4] == ("allreduce", main), ran


@pytest.mark.timeout(120)
def test_knob_sends_every_collective_to_the_progress_thread():
    for text in run_pair({"TORCH_XCCL_RUN_ON_CALLER": "0"}):
        main, ran = threads_of(text)
        assert set(ran) >= {1, 2, 3, 4}, text[-3000:]
        assert all(tid != main for _, tid in ran.values()), ran
