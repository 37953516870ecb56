"""The dtypes past torch's classic nine: float8_e4m3fn, float8_e5m2, uint16, uint32, uint64.

FP8 results must equal torch's own arithmetic bit for bit: every one of the 256 codes (NaNs
aside for max/min) summed, multiplied, maxed and minned with another, each result widened to
float, computed, and rounded once as torch's conversion rounds (e4m3fn saturates at 448, e5m2
overflows to infinity); avg is the sum rounded, then halved and rounded again (Sum, then
divide). Unsigned integers wrap modulo 2^bits."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness import communicate_all, free_port

SCRIPT = r"""
import os, torch, torch.distributed as dist, torch_xccl
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("xccl")
codes = torch.arange(256, dtype=torch.uint8)
mine = codes if rank == 0 else codes[torch.randperm(256, generator=torch.Generator().manual_seed(7))]
peer = codes if rank == 1 else codes[torch.randperm(256, generator=torch.Generator().manual_seed(7))]
R = dist.ReduceOp
for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
    a, b = mine.view(dt), peer.view(dt)          # rank 0's and rank 1's inputs
    x, y = codes.view(dt).float(), codes[torch.randperm(256, generator=torch.Generator().manual_seed(7))].view(dt).float()
    finite = ~(x.isnan() | y.isnan())
    for op, ref in ((R.SUM, x + y), (R.PRODUCT, x * y), (R.MAX, torch.maximum(x, y)),
                    (R.MIN, torch.minimum(x, y)), (R.AVG, (x + y).to(dt).float() / 2)):
        t = a.clone()
        dist.all_reduce(t, op=op)
        got, want = t.float(), ref.to(dt).float()
        keep = finite if op in (R.MAX, R.MIN) else torch.ones_like(finite)
        g, w = got[keep], want[keep]
        same = (g == w) | (g.isnan() & w.isnan())
        assert bool(same.all()), (dt, op, g[~same][:8].tolist(), w[~same][:8].tolist())
for dt, bits in ((torch.uint16, 16), (torch.uint32, 32), (torch.uint64, 64)):
    n = 1000
    g = torch.Generator().manual_seed(11 + rank)
    v = torch.randint(-2**62, 2**62, (n,), generator=g, dtype=torch.int64)
    mask = (1 << bits) - 1 if bits < 64 else -1
    vals = [torch.randint(-2**62, 2**62, (n,), generator=torch.Generator().manual_seed(11 + r),
                          dtype=torch.int64) & mask for r in range(world)]
    for op in (R.SUM, R.MAX, R.BAND, R.BXOR):
        t = (v & mask).to(dt) if bits < 64 else v.view(torch.uint64).clone()
        dist.all_reduce(t, op=op)
        got = t.to(torch.int64) if bits < 64 else t.view(torch.int64)
        if op == R.SUM:
            want = sum(vals) & mask
        elif op == R.MAX:
            u = [x if bits < 64 else x ^ (-2**63) for x in vals]   # unsigned order
            want = torch.stack(u).max(0).values
            want = want if bits < 64 else want ^ (-2**63)
        elif op == R.BAND:
            want = vals[0]
            for x in vals[1:]: want = want & x
        else:
            want = vals[0]
            for x in vals[1:]: want = want ^ x
        assert torch.equal(got, want), (dt, op)
print("CHECKED", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.timeout(120)
def test_fp8_and_unsigned_match_torch():
    world, port = 2, free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, env=env))
    for rc, text in communicate_all(procs, 100):
        assert rc == 0 and "CHECKED" in text, text[-4000:]
