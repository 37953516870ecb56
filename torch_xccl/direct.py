"""Direct calls: collectives called straight into libxccl, for latency-bound callers.

    from torch_xccl import direct
    direct.all_reduce(t)                          # in place, on the default group
    direct.all_reduce(t, dist.ReduceOp.MAX, group=tp_group)

``dist.all_reduce`` spends several microseconds before a backend sees the call: its Python
checks, torch's dispatcher, a Work and its future. For a tensor-parallel layer at inference,
or a scalar reduced every step, that is most of the time an 8-byte allreduce takes. A direct
call is one pybind11 call: the allreduce runs to its end on the calling thread, on the
group's own xccl communicator, and returns the tensor, reduced (the role DeepSpeed's
``inference_all_reduce`` plays beside torch.distributed). docs/PLUGIN.md, "Direct calls", has
the numbers.

It is the same collective as the group's other ones: every rank must make its direct calls
in the same order as its other collectives on the group (as always), the group's timeout
bounds it, and a failure raises ``torch.distributed.DistBackendError`` after the group's
error handling ran (TORCH_XCCL_ASYNC_ERROR_HANDLING). What it does not have: no Work (it
returns when done), no flight-recorder entry or sequence number, TORCH_XCCL_DESYNC_DEBUG and
TORCH_XCCL_ENABLE_TIMING do not see it, and it cannot be part of a coalescing block.
Tensors: contiguous cpu tensors of any dtype the group reduces (for device tensors, which
are ordered on streams, use ``dist.all_reduce``). Made inside ``torch_xccl.peer_memory()``,
they are read in place by the host's other ranks, as with ``dist.all_reduce``.
"""
import weakref

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as _c10d

from . import _C

__all__ = ["all_reduce"]

_SUM = dist.ReduceOp.SUM
# id(group) -> (a weak reference to the group, its handle): looked up on every call, so a
# dict and an identity check, not a WeakKeyDictionary (which makes a weakref per lookup).
_handles = {}
# The default group's handle, used without looking the group up: a handle answers False
# (nothing ran) once its group's backend is shut down or freed, as destroy_process_group
# does, and the call then looks the default group up again.
_default = None


def _bind(group):
    global _default
    if group is None:
        group = _c10d.GroupMember.WORLD
        if group is None:
            raise ValueError("torch_xccl.direct: no default process group; call "
                             "torch.distributed.init_process_group first")
    if group is _c10d.GroupMember.NON_GROUP_MEMBER:
        raise ValueError("torch_xccl.direct: this rank is not a member of the group")
    try:
        backend = group._get_backend(torch.device("cpu"))
    except RuntimeError as e:
        raise ValueError(f"torch_xccl.direct: the group has no cpu backend ({e})") from None
    h = _C._direct_group(backend)
    # Entries of groups that are gone, so the table stays as small as the live groups.
    for key in [k for k, (ref, _) in _handles.items() if ref() is None]:
        del _handles[key]
    _handles[id(group)] = (weakref.ref(group), h)
    if group is _c10d.GroupMember.WORLD:
        _default = h
    return h


def all_reduce(tensor, op=_SUM, group=None):
    """Reduces ``tensor`` in place across ``group`` (default: the default group) and returns
    it, run on this thread before returning. ``op``: a ``torch.distributed.ReduceOp`` (SUM,
    PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR; not PREMUL_SUM). Raises ValueError for a tensor
    it cannot take (not cpu, not contiguous, a dtype or op the group does not reduce) or a
    group it cannot use, RuntimeError inside a coalescing block, DistBackendError when the
    group is shut down or the operation failed."""
    if group is None:
        h = _default
    else:
        e = _handles.get(id(group))
        h = e[1] if e is not None and e[0]() is group else None
    if h is not None and (h(tensor) if op is _SUM else h(tensor, op)):
        return tensor
    h = _bind(group)  # first call, or the handle's group was shut down: look it up again
    if not (h(tensor) if op is _SUM else h(tensor, op)):
        raise dist.DistBackendError("torch_xccl.direct.all_reduce: " + _C._direct_closed_reason(h))
    return tensor
