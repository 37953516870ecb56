"""xccl as torchft's process group: fault-tolerant training across replica groups.

torchft (PyPI ``torchft``) keeps training going when a whole replica group fails: a
lighthouse keeps the quorum, each step's gradients are averaged across the replica groups
that are alive, a failed step is discarded, and a replica that comes back heals from a live
one. Its extension point for a communication library is a reconfigurable process group: a
``torchft.process_group.ProcessGroupWrapper`` whose ``_create_pg(store, rank, world_size)``
makes the group of each quorum. :class:`ProcessGroupXCCL` is that, over torch_xccl's backend,
for cpu and xdev tensors (and cuda where torch has it)::

    from torch_xccl.ft import ProcessGroupXCCL
    manager = torchft.Manager(pg=ProcessGroupXCCL(), ...)

A peer that dies mid-step fails the step's allreduce at once (never a partial sum). As
torchft expects of its process groups (its NCCL one learns of failures asynchronously), the
failure is not raised from ``wait()``: it is recorded and reported by ``errored()``, which the
Manager reads before committing, so the step is discarded; the next quorum gets a new group.

On a device (xdev, cuda) a failed collective normally fails the stream it was ordered on, so
that no kernel reads an unreduced output as a result (docs/RELIABILITY.md). torchft wants
NCCL's behaviour instead (the stream goes on; the step is discarded because ``errored()`` says
so), and this group asks libxccl for exactly that: its device communicators are made with
``xcclStreamErrorsReport``. Safe here only because torchft never commits a step whose
collective failed. ``examples/elastic/torchft_xccl.py`` runs two replica groups, kills one and
restarts it (docs/ELASTIC.md).
"""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed.distributed_c10d as c10d
from torch.distributed import Work
from torchft.process_group import ProcessGroupWrapper

from . import _routing


class ProcessGroupXCCL(ProcessGroupWrapper):
    """torchft's reconfigurable process group over torch_xccl (backend name "torchft-xccl")."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60.0)) -> None:
        super().__init__(timeout)
        self._errored: Exception | None = None

    def _create_pg(self, store, rank: int, world_size: int):
        self._errored = None
        group_name = ""
        if self._quorum_id is not None and self._group_rank is not None:
            group_name = f"torchft_quorum_{self._quorum_id}_rank_{self._group_rank}"
        # report_stream_errors: a failed collective leaves its device stream running; torchft
        # discards the step (errored()), so its undefined outputs are never committed.
        backend = _routing._create(store, rank, world_size, self._timeout, group_name,
                                   self._global_ranks, report_stream_errors=True)
        pg = c10d.ProcessGroup(store, rank, world_size)
        xccl = c10d.ProcessGroup.BackendType.XCCL
        for name in _routing.devices():
            if name == "cuda" and not torch.cuda.is_available():
                continue
            pg._register_backend(torch.device(name), xccl, backend)
        pg._set_default_backend(xccl)
        return pg

    def getBackendName(self) -> str:
        return "torchft-xccl"

    def _wrap_work(self, work: Work, opts: object) -> Work:
        return _RecordingWork(self, work)

    def record_error(self, e: Exception) -> None:
        if self._errored is None:
            self._errored = e

    def errored(self) -> Exception | None:
        return self._errored

    def abort(self, errored: bool = True) -> None:
        if errored:
            self.record_error(RuntimeError("torchft aborted the xccl process group"))
        super().abort(errored=errored)


class _RecordingWork(Work):
    """A work whose failure is recorded on its process group instead of raised."""

    def __init__(self, pg: ProcessGroupXCCL, work: Work) -> None:
        super().__init__()
        self._pg = pg
        self._work = work

    def wait(self, timeout: timedelta | None = None) -> bool:
        try:
            self._work.wait()
        except Exception as e:  # noqa: BLE001 - reported through errored()
            self._pg.record_error(e)
        return True

    def get_future(self):
        def settle(fut):
            try:
                return fut.value()
            except Exception as e:  # noqa: BLE001
                self._pg.record_error(e)
                return None

        return self._work.get_future().then(settle)


__all__ = ["ProcessGroupXCCL"]
