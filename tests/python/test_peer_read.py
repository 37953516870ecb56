"""Single copy through torch: xdev tensors are read in place by the peer ranks of a host.

xdev device memory lives in shareable segments, so a large collective on xdev tensors moves
each message with one pass (the receiver copies or reduces straight out of the sender's
buffer: a *peer read*) instead of two through the shared-memory rings. The path taken is
read from libxccl's log (XCCL_DEBUG=INFO, subsystem SHM, one line per link at its first peer
read); forced off with XCCL_PEER_READ=0, and on cpu tensors (which torch allocates, so they
cannot be shared), the rings carry the bytes, with the same results. Cpu tensors made inside
torch_xccl.peer_memory() live in xcclMemAlloc memory, which peers map: read in place too.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness import communicate_all, free_port

SCRIPT = r"""
import contextlib, os, sys, torch, torch.distributed as dist, torch_xccl
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device(sys.argv[1], rank) if sys.argv[1] == "xdev" else torch.device("cpu")
if dev.type == "xdev":
    torch.xdev.set_device(rank)
dist.init_process_group("xccl")
peer = torch_xccl.peer_memory() if sys.argv[1] == "cpu-peer" else contextlib.nullcontext()
with peer:
  for n in (1 << 20, (1 << 18) + 3, 5):          # messages above and below the threshold
      for dtype in (torch.float32, torch.bfloat16, torch.int64):
          base = torch.arange(n, dtype=torch.float64).remainder(97)
          t = (base + rank).to(dtype).to(dev)
          dist.all_reduce(t)                              # in place: ring or direct
          want = (base * world + world * (world - 1) / 2).to(dtype)
          assert torch.equal(t.cpu(), want), ("allreduce", n, dtype)
          out = torch.empty(n * world, dtype=dtype, device=dev)
          dist.all_gather_into_tensor(out, (base + rank).to(dtype).to(dev))
          for r in range(world):
              assert torch.equal(out[r * n:(r + 1) * n].cpu(), (base + r).to(dtype)), "allgather"
          b = (base + 10 * rank).to(dtype).to(dev)
          dist.broadcast(b, src=world - 1)
          assert torch.equal(b.cpu(), (base + 10 * (world - 1)).to(dtype)), "broadcast"
          o = torch.empty(n, dtype=dtype, device=dev)
          dist.reduce_scatter_tensor(o, torch.cat([(base + rank).to(dtype)] * world).to(dev))
          assert torch.equal(o.cpu(), want), "reduce_scatter"
if dev.type == "xdev":
    torch.xdev.synchronize()
if sys.argv[1] == "cpu-peer":
    stats = torch_xccl.peer_memory_stats()
    assert stats["allocated"] > 0 and stats["reused"] > 0, stats
print("CHECKED", flush=True)
dist.destroy_process_group()
"""


def run(world, device, extra_env=None):
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", XCCL_DEBUG="INFO",
                   XCCL_DEBUG_SUBSYS="SHM", **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, "-c", SCRIPT, device],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))
    outs = communicate_all(procs, 240)
    for rc, text in outs:
        assert rc == 0 and "CHECKED" in text, text[-4000:]
    return "\n".join(text for _, text in outs)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_xdev_tensors_are_read_in_place(world):
    text = run(world, "xdev")
    for r in range(world):
        assert f"rank {r} <- " in text and "single copy: reading rank" in text, text[-4000:]


@pytest.mark.timeout(300)
def test_forced_off_the_rings_carry_xdev_tensors():
    text = run(2, "xdev", {"XCCL_PEER_READ": "0"})
    assert "single copy: reading rank" not in text, text[-4000:]


@pytest.mark.timeout(300)
def test_cpu_tensors_go_through_the_rings():
    text = run(2, "cpu")
    assert "single copy: reading rank" not in text, text[-4000:]
    assert "go through the rings (two copies)" in text, text[-4000:]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_cpu_tensors_in_peer_memory_are_read_in_place(world):
    text = run(world, "cpu-peer")
    assert "single copy: reading rank" in text, text[-4000:]
