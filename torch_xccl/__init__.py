"""torch_xccl: the XCCL collective-communication library as a PyTorch c10d backend.

    import torch_xccl                      # loads the extension, routes "xccl" to it
    torch.distributed.init_process_group(backend="xccl")

See docs/PLUGIN.md for the routing, the TORCH_XCCL_* knobs and the limits.
"""
import torch  # noqa: F401  (loads libtorch before the extension)

# The xdev device first: torch_xccl._xdev_C registers PrivateUse1 (guard, hooks, allocators,
# kernels); xdev._register() names it "xdev" and installs torch.xdev (docs/XDEV_TORCH.md),
# unless torch was built for a GPU and xdev was not asked for (xdev._wanted: torch would make
# it the accelerator ahead of the GPU).
from . import xdev as _xdev

if _xdev._wanted():
    _xdev._register()

    from . import xdev_syncbn as _xdev_syncbn  # SyncBatchNorm's kernels on xdev

    _xdev_syncbn.register()

import torch.distributed  # noqa: E402,F401

from . import _C  # noqa: E402  the native module: backend + bindings (links lib/libxccl.so.0)
from . import _routing  # noqa: E402
from . import survivors  # noqa: E402  lost ranks, revoke, shrink (docs/ELASTIC.md)
from .memory import peer_memory, peer_memory_stats  # noqa: E402  (docs/MEMORY.md)
from . import direct  # noqa: E402,F401  calls with no Work (docs/PLUGIN.md, "Direct calls")

try:  # written by setup.py from xccl.h (the one version source)
    from ._version import __version__
except ImportError:  # pragma: no cover - a checkout on sys.path that was never built
    from importlib.metadata import version as _dist_version

    __version__ = _dist_version("torch_xccl")


def xccl_version() -> str:
    """Version of the libxccl the extension is running with, as "MAJOR.MINOR.PATCH"."""
    code = _C.xccl_version()
    return f"{code // 10000}.{(code // 100) % 100}.{code % 100}"


def describe(group=None) -> str:
    """One line describing the xccl backend of ``group`` (rank, size, timeout, knobs)."""
    import torch.distributed.distributed_c10d as c10d

    group = group or c10d._get_default_group()
    return _C._describe(group._get_backend(torch.device("cpu")))


def dump_flight_record(path=None) -> str:
    """Writes this process's flight record (its last TORCH_XCCL_TRACE_BUFFER_SIZE xccl
    operations, docs/RELIABILITY.md) as JSON and returns the file written.

    ``path``: a file, or an existing directory to write ``rank_<r>.json`` in; by default
    ``$TORCH_XCCL_TRACE_DIR/rank_<r>.json``. Read the files of a job with
    ``python -m torch_xccl.fr_trace DIR``.
    """
    import os

    return _C._dump_flight_record(os.fspath(path) if path is not None else "")


def flight_record() -> dict:
    """This process's flight record as Python objects: the dump's dict (rank, world_size,
    groups, ...) with the operations, oldest first, under ``"entries"``."""
    import json

    return json.loads(_C._flight_record_json())


def _before_exit() -> None:
    """atexit: end the backends' completion threads while Python still runs (a Work they
    release may own tensors' Python objects; releasing one after Python began to finalize
    aborts the process, ProcessGroupXCCL.cpp)."""
    _C._stop_completion_threads_before_exit()


import atexit  # noqa: E402

atexit.register(_before_exit)

is_routed = _routing.is_routed
is_torch_xccl_backend = _routing.is_torch_xccl_backend

_routing.route()

__all__ = ["__version__", "xccl_version", "describe", "is_routed", "is_torch_xccl_backend",
           "dump_flight_record", "flight_record", "survivors", "peer_memory",
           "peer_memory_stats"]
