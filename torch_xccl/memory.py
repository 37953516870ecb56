"""Plain cpu tensors that other processes of this host can read in place (docs/MEMORY.md).

    with torch_xccl.peer_memory():
        grads = torch.zeros(1 << 20)     # in memory from xcclMemAlloc
    dist.all_reduce(grads)               # peers read it in place: one copy, not two

While the context is open, every CPU allocation of this process of `min_bytes` or more (any
thread) comes from libxccl's xcclMemAlloc: memory the processes of a host can map, which the
xccl backend's collectives read in place between ranks of one host, as they read xdev device
memory. Smaller allocations, and all allocations once it is closed, come from the allocator it
replaced. Tensors made inside keep their memory after it closes; freed blocks are kept for
reuse by size (up to 1 GiB), since a training step makes the same sizes every iteration.
"""
from __future__ import annotations

import contextlib

from . import _C

# Messages of XCCL_PEER_READ_MIN (64 KiB) bytes or more are read in place; smaller tensors
# go through the rings whatever their memory, so they need not take a memfd.
DEFAULT_MIN_BYTES = 64 << 10


@contextlib.contextmanager
def peer_memory(min_bytes: int = DEFAULT_MIN_BYTES):
    """CPU tensors of `min_bytes` or more allocated inside are in xcclMemAlloc memory."""
    if min_bytes < 1:
        raise ValueError(f"peer_memory(min_bytes={min_bytes}): must be at least 1")
    _C._peer_memory_begin(int(min_bytes))
    try:
        yield
    finally:
        _C._peer_memory_end()


def peer_memory_stats() -> dict:
    """on (a context is open), live_blocks / live_bytes (tensors' blocks in use),
    cached_bytes (freed, kept for reuse), allocated (xcclMemAlloc calls), reused."""
    return dict(_C._peer_memory_stats())
