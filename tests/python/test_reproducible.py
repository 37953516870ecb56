"""XCCL_REPRODUCIBLE=1 through torch: the reductions equal torch's own rank-order fold bit for
bit on cpu and xdev tensors, and DDP gives identical parameters on one host and on two
network-namespace hosts (docs/ALGORITHMS.md, "Determinism")."""
import os
import re
import subprocess
import sys
import uuid

import pytest

import netns
from harness import free_port, run_world
from procs import finish, kill_marked

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "repro_ddp.py")
MARKER = "TEST_REPRODUCIBLE_MARKER"  # in the environment of every process a DDP run starts


def fold_worker(rank, world, device):
    """Each dtype and size: whether all_reduce / reduce / reduce_scatter gave exactly the
    left fold computed here by torch from every rank's (seeded) input."""
    import torch
    import torch.distributed as dist

    dev = torch.device(device, rank % 2) if device != "cpu" else torch.device("cpu")
    out = {}
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for n in (5, 70000, 300000):
            def data(r):
                g = torch.Generator().manual_seed(r * 7919 + n)
                scale = 10.0 ** torch.randint(-3, 4, (n,), generator=g).double()
                return (torch.randn(n, generator=g, dtype=torch.float64) * scale).to(dtype)
            want = data(0)
            for r in range(1, world):
                want = want + data(r)  # torch's fold: one rounding per step, in rank order
            t = data(rank).to(dev)
            dist.all_reduce(t)
            ok_ar = torch.equal(t.cpu().view(torch.int8 if dtype.itemsize == 1 else dtype),
                                want) and bool((t.cpu() == want).all() | want.isnan().any())
            same_bits = t.cpu().view(torch.uint8).equal(want.view(torch.uint8))
            r_in = data(rank).to(dev)
            dist.reduce(r_in, dst=1)
            red = rank != 1 or r_in.cpu().view(torch.uint8).equal(want.view(torch.uint8))
            block = n // world
            rs = torch.empty(block, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(rs, data(rank)[: block * world].to(dev))
            mine = want[rank * block:(rank + 1) * block]
            rs_ok = rs.cpu().view(torch.uint8).equal(mine.view(torch.uint8))
            out[f"{dtype}/{n}"] = (same_bits and ok_ar, red, rs_ok)
    return out


@pytest.mark.timeout(200)
@pytest.mark.parametrize("device", ["cpu", "xdev"])
def test_reductions_are_torchs_rank_order_fold(monkeypatch, device):
    monkeypatch.setenv("XCCL_REPRODUCIBLE", "1")
    kw = {"device_id": "xdev"} if device == "xdev" else {}
    results = run_world(fold_worker, 3, timeout=180, device=device, **kw)
    for rank, r in enumerate(results):
        bad = {k: v for k, v in r.items() if not all(v)}
        assert not bad, (rank, bad)


def torchrun(nodes, node, master, port, nproc, env):
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}",
            f"--node-rank={node}", f"--master-addr={master}", f"--master-port={port}",
            f"--nproc-per-node={nproc}", SCRIPT]


def hashes(text):
    found = dict(re.findall(r"rank (\d+) parameters sha256 ([0-9a-f]+)", text))
    assert sorted(found) == ["0", "1", "2", "3"], text[-4000:]
    assert len(set(found.values())) == 1, text[-4000:]  # DDP kept the ranks in step
    return found["0"]


def run(procs, marker, timeout=150):
    """Every process's output; a failure or the timeout fails the test, and every process
    this test started (torchrun's workers included) is killed on the way out."""
    try:
        outs = finish(procs, timeout)
    finally:
        kill_marked(MARKER, marker)
    for rc, out in outs:
        assert rc == 0, out[-4000:]
    return "".join(out for _, out in outs)


def one_host(reproducible):
    marker = uuid.uuid4().hex
    env = dict(os.environ, OMP_NUM_THREADS="1", XCCL_REPRODUCIBLE=reproducible,
               **{MARKER: marker})
    port = free_port()
    p = subprocess.Popen(torchrun(1, 0, "127.0.0.1", port, 4, env), env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return hashes(run([p], marker))


@pytest.mark.skipif(bool(netns.available()), reason=netns.available() or "ok")
@pytest.mark.timeout(300)
def test_ddp_parameters_are_the_same_on_one_host_and_on_two():
    """4 ranks: on one host (SHM, ring for the 8 MiB buckets), then 2 namespace hosts x 2 ranks
    (TCP across, hierarchical by default). With XCCL_REPRODUCIBLE=1 the parameters after three
    steps have the same sha256; without it the one-host run differs (the ring's order), which
    is what makes the comparison able to fail."""
    marker = uuid.uuid4().hex
    env = dict(os.environ, OMP_NUM_THREADS="1", XCCL_REPRODUCIBLE="1", **{MARKER: marker})
    env.pop("XCCL_NODE_ID", None)
    with netns.hosts(2, "r", switch=False) as hs:
        port = 29631
        procs = [h.popen(torchrun(2, i, hs[0].addr, port, 2, env), env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for i, h in enumerate(hs)]
        across = hashes(run(procs, marker))
    assert one_host("1") == across
    assert one_host("0") != across
