"""torch_xccl.peer_memory(): which cpu tensors land in xcclMemAlloc memory, block reuse, and
torch code that frees through the allocator's raw deleter (oneDNN's convolution scratch)."""
from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = r"""
import torch, torch.nn.functional as F, torch_xccl
s = torch_xccl.peer_memory_stats
with torch_xccl.peer_memory():
    assert s()["on"]
    big = torch.zeros(1 << 16)                # 256 KiB: a peer-memory block
    small = torch.zeros(100)                  # under 64 KiB: the replaced allocator
    assert s()["live_blocks"] == 1, s()
    del big
    assert s()["live_blocks"] == 0 and s()["cached_bytes"] == 1 << 18, s()
    again = torch.zeros(1 << 16)              # the same size: the cached block again
    assert s()["reused"] == 1 and s()["allocated"] == 1, s()
    with torch_xccl.peer_memory(min_bytes=1): # nested: the outer threshold stays
        tiny = torch.zeros(10)
    assert s()["live_blocks"] == 1, s()
    # oneDNN frees its scratch through the allocator's raw deleter (torch asserts one exists)
    x = torch.randn(8, 3, 32, 32, requires_grad=True)
    w = torch.randn(16, 3, 3, 3, requires_grad=True)
    F.conv2d(x, w, padding=1).sum().backward()
    assert x.grad.shape == x.shape
assert not s()["on"]
live = s()["live_blocks"]
after = torch.zeros(1 << 16)                  # closed: not peer memory
assert s()["live_blocks"] == live, s()
del again, after, x, w
assert s()["live_blocks"] == 0, s()
try:
    with torch_xccl.peer_memory(min_bytes=0):
        pass
    raise SystemExit("min_bytes=0 accepted")
except ValueError:
    pass
print("CHECKED")
"""


@pytest.mark.timeout(120)
def test_which_tensors_land_in_peer_memory_and_blocks_are_reused():
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=100)
    assert p.returncode == 0 and "CHECKED" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
