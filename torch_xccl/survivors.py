"""Keep going when a rank is lost: find who is gone, tell the others, shrink the group.

A collective whose peer dies fails on every survivor within a fraction of a second
(docs/RELIABILITY.md). From there::

    try:
        loss.backward(); optimizer.step()
    except torch.distributed.DistBackendError:
        group = torch_xccl.survivors.shrink()   # the survivors only; the default group now
        # rebuild DDP on the new group (it gives everyone rank 0's weights), take rank 0's
        # position (a broadcast: one survivor may have completed the step another failed),
        # re-shard the data, redo the step

``shrink`` asks every rank's process whether it still answers (``lost_ranks``), then calls
``torch.distributed.shrink_group`` with those ranks and ``SHRINK_ABORT``: the new group's
communicators are made from the old ones (libxccl's ``xcclCommShrink``) without the store's
rendezvous, so it works when the rank that hosted the store is the one lost, too. On xdev it
then clears the device's sticky stream errors (``torch.xdev.clear_errors``): the failed step's
outputs were never results, and the caller is redoing it. docs/ELASTIC.md has the whole story.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from . import _C


def _backend(group):
    group = group or c10d._get_default_group()
    backend = group._get_backend(torch.device("cpu"))
    if not _C._is_xccl_backend(backend):
        raise TypeError(f"group {c10d._get_process_group_name(group)!r} does not run on xccl")
    return group, backend


def lost_ranks(group=None, timeout: float = 1.0) -> list[int]:
    """The ranks of ``group`` (group ranks, as ``shrink_group`` takes them) whose process no
    longer answers on its xccl bootstrap service. A killed process is found at once (its port
    refuses); a stopped or unreachable one after ``timeout`` seconds. Works on a group whose
    collectives have failed. This rank is never in the list."""
    _, backend = _backend(group)
    alive = _C._probe_alive(backend, int(timeout * 1000))
    return [r for r, up in enumerate(alive) if not up]


def revoke(group=None) -> None:
    """Fails every pending and later operation of ``group`` here and on every rank still
    reachable ("rank r revoked the communicator"), e.g. when this rank decides the step is
    lost for a reason the others cannot see. The group can still be shrunk."""
    _, backend = _backend(group)
    _C._revoke(backend)


def shrink(group=None, exclude: list[int] | None = None, timeout: float = 1.0):
    """``dist.shrink_group`` without the ranks that are gone (``exclude``, or those
    ``lost_ranks`` finds), aborting what was pending. Returns the new group (the new default
    group when ``group`` is the default). Raises RuntimeError when nobody is lost."""
    group, _ = _backend(group)
    if exclude is None:
        exclude = lost_ranks(group, timeout)
    if not exclude:
        raise RuntimeError("torch_xccl.survivors.shrink: every rank of the group still answers; "
                           "nothing to exclude (a collective failed for another reason?)")
    device = _xdev_device(group)
    new_group = dist.shrink_group(sorted(exclude), group=group, shrink_flags=c10d.SHRINK_ABORT)
    if device is not None:
        torch.xdev.clear_errors(device)
    return new_group


def _xdev_device(group):
    try:
        backend = group._get_backend(torch.device("cpu"))
        name = backend._device_comm_device()
    except (RuntimeError, AttributeError):
        return None
    return torch.device(name) if name.startswith("xdev") else None


__all__ = ["lost_ranks", "revoke", "shrink"]
