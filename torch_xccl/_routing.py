"""How ``backend="xccl"`` reaches torch_xccl on a stock torch — the whole mechanism lives here.

The problem: torch >= 2.8 knows a built-in backend named "xccl" (Intel XPU).
``torch.distributed.distributed_c10d._new_process_group_helper`` has a branch::

    elif backend_str == Backend.XCCL:
        if not is_xccl_available():
            raise RuntimeError("Distributed package doesn't have XCCL built in")
        backend_options = ProcessGroupXCCL.Options()      # older torch: no options
        ...
        backend_class = ProcessGroupXCCL(prefix_store, group_rank, group_size, backend_options)
        backend_type = ProcessGroup.BackendType.XCCL

which runs *before* third-party plugins (``Backend._plugins``) are consulted, so
``Backend.register_backend("xccl", ...)`` alone can never be reached.

The approach (no public torch function is replaced or rewritten; one private helper of
``shrink_group`` is wrapped, see ``_install_shrink``): when torch's own XCCL is not
available — every CPU or CUDA build — we complete that branch with our backend. The branch
looks up two names in the ``distributed_c10d`` module namespace at call time:

* ``is_xccl_available`` — rebound there to a function that answers True when torch_xccl is
  routed (and, below, the public ``torch.distributed.is_xccl_available`` too);
* ``ProcessGroupXCCL`` — bound to :class:`ProcessGroupXCCL` below, whose constructor accepts
  both call shapes (with and without ``Options``) and returns torch_xccl's C++ backend.

and two data entries: ``Backend.backend_capability["xccl"] = ["cpu", "xdev", "cuda"]`` so that
``BackendConfig("xccl")`` maps the "cpu", "xdev" and "cuda" devices to our backend (torch's default
is "xpu"); torch creates one backend and registers it for every device ("xdev" only where this
process registered the device: not on a torch built for a GPU unless asked for). And
``Backend.default_device_backend_map["xdev"] = "xccl"``, the table where torch asks third-party
devices to name their default backend (cpu -> gloo, cuda -> nccl, xpu -> xccl): it serves
``init_process_group()`` without a backend in a process whose accelerator is xdev,
``init_process_group(device_id=torch.device("xdev", i))``, ``init_device_mesh("xdev", ...)``
and tools that read the table (torchtitan).

``torch.distributed.is_xccl_available`` (the public function, which
``dist.is_backend_available("xccl")`` consults) is rebound too, to answer True once "xccl"
reaches torch_xccl: an application asking whether it may pass backend="xccl" gets the true
answer. What torch itself ships is kept in ``BUILTIN_XCCL_AVAILABLE``.
``Backend("xccl")``, ``get_backend()``, ``new_group(backend="xccl")``, "cpu:xccl" strings
and DDP all go through the same branch.

When torch's own XCCL *is* available (an XPU build) nothing is changed and a warning is
issued, unless ``TORCH_XCCL_OVERRIDE_BUILTIN=1``, in which case "xccl" is taken over the same
way (for the "cpu" device).

Known limit of riding the built-in branch: the group's backend type is
``ProcessGroup.BackendType.XCCL``, for which torch's C++ ``ProcessGroup::barrier`` picks an
XPU tensor when *no device* is given. ``dist.barrier()`` always passes the device, so only a
direct ``pg.barrier()`` call on the C++ ProcessGroup object is affected; use dist.barrier().
"""
from __future__ import annotations

import datetime
import os
import warnings

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

OVERRIDE_ENV = "TORCH_XCCL_OVERRIDE_BUILTIN"


def devices() -> list:
    """The devices the backend serves: cpu, cuda, and xdev where this process registered it
    (torch_xccl.xdev, before routing runs; not on a torch built for a GPU unless asked for)."""
    from . import xdev

    return ["cpu", "xdev", "cuda"] if xdev.registered() else ["cpu", "cuda"]



# Captured before anything here runs: does torch itself ship XCCL?
_torch_is_xccl_available = c10d.is_xccl_available
BUILTIN_XCCL_AVAILABLE: bool = bool(_torch_is_xccl_available())

# "routed": "xccl" reaches torch_xccl; "builtin": left to torch's own XCCL; None: not yet run.
state: str | None = None


def _create(store, rank: int, size: int, timeout, group_name: str = "", ranks=None,
            report_stream_errors: bool = False):
    from . import _C

    if timeout is None:
        timeout = getattr(store, "timeout", None) or c10d.default_pg_timeout
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    return _C._create_backend(store, rank, size, timeout, group_name or "", list(ranks or []),
                              report_stream_errors)


class ProcessGroupXCCL:
    """Stands in for torch's ``ProcessGroupXCCL`` symbol inside ``distributed_c10d``.

    Calling it returns torch_xccl's C++ backend (a ``torch._C._distributed_c10d.Backend``).
    """

    class Options:
        """The attributes the built-in branch sets; anything else is accepted and ignored."""

        def __init__(self) -> None:
            self.global_ranks_in_group: list[int] = []
            self.group_name: str = ""
            self._timeout = c10d.default_pg_timeout

    def __new__(cls, store, rank, size, options=None, *args, **kwargs):
        timeout = getattr(options, "_timeout", None) if options is not None else None
        return _create(
            store,
            rank,
            size,
            timeout,
            getattr(options, "group_name", "") if options is not None else "",
            getattr(options, "global_ranks_in_group", None) if options is not None else None,
        )


def _routed_is_xccl_available() -> bool:
    return True


def _install_shrink() -> None:
    """``dist.shrink_group`` registers the new backend for one device only (the group's bound
    device, else cpu) and under the type GLOO (NCCL for cuda); a torch_xccl group serves cpu,
    xdev and cuda tensors alike, as type XCCL. The one private torch function wrapped here
    (``_create_shrunk_process_group``, torch >= 2.10): the group it returns gets our backend
    for every device of ``devices()``, type XCCL."""
    original = getattr(c10d, "_create_shrunk_process_group", None)
    if original is None or getattr(original, "_torch_xccl", False):
        return  # torch < 2.10 has no shrink_group; or already wrapped

    def create_shrunk(new_backend, remaining_ranks, metadata, is_default_group):
        pg = original(new_backend, remaining_ranks, metadata, is_default_group)
        from . import _C
        import torch

        if _C._is_xccl_backend(new_backend):
            # torch registers it as GLOO (or NCCL when bound to cuda): code that trusts the
            # type casts it to ProcessGroupGloo (DDP's logger does, and crashes). Ours is
            # XCCL, as at init_process_group, for every device it serves.
            xccl = c10d.ProcessGroup.BackendType.XCCL
            for name in devices():
                pg._register_backend(torch.device(name), xccl, new_backend)
            pg._set_default_backend(xccl)
        return pg

    create_shrunk._torch_xccl = True
    c10d._create_shrunk_process_group = create_shrunk


def _install_coalescing_guard() -> None:
    """torch's ``_coalescing_manager`` (``batch_isend_irecv``, coalesced collectives) does not
    clean up when an operation inside it raises: the group stays in
    ``_world.pg_coalesce_state``, and every later collective on that group is only recorded
    and returns without running (an output never reduced, read as a result: found by the fault
    suite). The wrapper forgets the block on an exception, and on a torch_xccl group ends the
    backend's block too (its libxccl group discarded, its Works failed)."""
    original = getattr(c10d, "_coalescing_manager", None)
    if original is None or getattr(original, "_torch_xccl", False):
        return
    import contextlib

    @contextlib.contextmanager
    def coalescing_manager(group=None, device=None, async_ops=False):
        target = group or c10d._get_default_group()
        try:
            with original(group, device, async_ops) as cm:
                yield cm
        except BaseException:
            c10d._world.pg_coalesce_state.pop(target, None)
            if device is not None:
                from . import _C

                try:
                    backend = target._get_backend(device)
                except RuntimeError:
                    backend = None
                if backend is not None and _C._is_xccl_backend(backend):
                    _C._abandon_coalescing(backend, "an operation of the block raised")
            raise

    coalescing_manager._torch_xccl = True
    c10d._coalescing_manager = coalescing_manager
    if getattr(dist, "_coalescing_manager", None) is original:  # the same function, re-exported
        dist._coalescing_manager = coalescing_manager


def _install() -> None:
    _install_shrink()
    _install_coalescing_guard()
    c10d.ProcessGroupXCCL = ProcessGroupXCCL
    c10d.is_xccl_available = _routed_is_xccl_available
    dist.is_xccl_available = _routed_is_xccl_available
    c10d.Backend.backend_capability[c10d.Backend.XCCL] = devices()
    if "xdev" in devices():
        c10d.Backend.default_device_backend_map.setdefault("xdev", c10d.Backend.XCCL)


def route() -> str:
    """Make ``backend="xccl"`` reach torch_xccl (idempotent). Returns the resulting state."""
    global state
    if state is not None:
        return state
    assert c10d.Backend("xccl") == c10d.Backend.XCCL == "xccl"
    if not BUILTIN_XCCL_AVAILABLE:
        _install()
        state = "routed"
    elif os.environ.get(OVERRIDE_ENV, "0") == "1":
        warnings.warn(
            f"torch_xccl: torch has its own XCCL backend (Intel XPU); {OVERRIDE_ENV}=1 routes "
            "backend='xccl' to torch_xccl instead (cpu tensors).",
            stacklevel=2,
        )
        _install()
        state = "routed"
    else:
        warnings.warn(
            "torch_xccl: this torch build has its own XCCL backend (Intel XPU), so "
            "backend='xccl' stays torch's. Set "
            f"{OVERRIDE_ENV}=1 before importing torch_xccl to use torch_xccl for 'xccl'.",
            stacklevel=2,
        )
        state = "builtin"
    return state


def is_routed() -> bool:
    """True when ``dist.init_process_group(backend="xccl")`` creates a torch_xccl backend."""
    return state == "routed"


def is_torch_xccl_backend(group=None) -> bool:
    """True when ``group`` (default: the default group) runs on torch_xccl for cpu tensors."""
    from . import _C
    import torch

    group = group or c10d._get_default_group()
    try:
        backend = group._get_backend(torch.device("cpu"))
    except RuntimeError:
        return False
    return bool(_C._is_xccl_backend(backend))


__all__ = ["route", "is_routed", "is_torch_xccl_backend", "ProcessGroupXCCL", "OVERRIDE_ENV",
           "BUILTIN_XCCL_AVAILABLE", "dist"]
