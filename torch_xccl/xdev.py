"""torch.xdev: the host-memory simulated accelerator "xdev" as a PyTorch device.

``import torch_xccl`` (or ``import torch`` alone, through the device-backend autoload entry
point) renames PrivateUse1 to "xdev" and registers this module as ``torch.xdev``::

    x = torch.ones(3, device="xdev:1")
    with torch.xdev.device(1), torch.xdev.stream(torch.xdev.Stream()):
        y = x * 2

Device, stream and event handling is torch's own device-generic machinery (torch.Stream,
torch.Event, torch.accelerator) over the xdev guard registered by ``torch_xccl._xdev_C``;
this module adds the CUDA-like names. See docs/XDEV_TORCH.md.

xdev exists on every machine, so it becomes torch's accelerator only in a process that uses
it (docs/XDEV_TORCH.md, "xdev beside CPU-only programs"): the first xdev tensor, device,
stream or ``torch.xdev.init()`` claims it, or ``TORCH_XCCL_ACCELERATOR=xdev`` from the start.
Before that, ``is_available()`` (and so ``torch.accelerator.is_available()``) is False and
torch picks its CPU defaults, exactly as without torch_xccl. On a torch built for CUDA, ROCm
or XPU, xdev is not registered at all unless ``TORCH_XCCL_ACCELERATOR=xdev`` (``_wanted``):
torch would make it the accelerator ahead of the GPU.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Union

import torch

from . import _xdev_C as _C

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "device_of",
    "synchronize", "clear_errors", "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream",
    "StreamContext", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "default_generators", "memory_allocated",
    "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
    "reset_peak_memory_stats", "empty_cache", "mem_get_info", "is_initialized", "init",
    "get_device_name", "get_device_properties", "is_bf16_supported", "get_amp_supported_dtype",
]

_DeviceLike = Union[torch.device, str, int, None]


def _index(device: _DeviceLike = None, optional: bool = True) -> int:
    """Device index of an xdev device-like (None: the current device); checks the range."""
    if device is None:
        return _C._current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "xdev":
            raise ValueError(f"Expected an xdev device, but got: {device}")
        if device.index is None:
            return _C._current_device()
        device = device.index
    if not isinstance(device, int):
        raise TypeError(f"Expected an xdev device, int or None, got {type(device).__name__}")
    if device < 0:
        if optional and device == -1:
            return _C._current_device()
        raise ValueError(f"xdev: device index must not be negative, got {device}")
    _C._check_device(device)
    return device


def is_available() -> bool:
    """True once this process uses xdev (torch's accelerator is then xdev; see the module
    docstring), and there is at least one device. ``device_count()`` says how many exist
    whether or not the process uses them; ``init()`` makes xdev this process's device."""
    return _C._accelerator_claimed() and _C._device_count() > 0


_in_bad_fork = False


def _mark_bad_fork() -> None:
    global _in_bad_fork
    _in_bad_fork = True


def _is_in_bad_fork() -> bool:
    """True in a child forked after torch_xccl was imported: the runtime's stream workers do
    not survive fork (the runtime refuses work there), so torch.manual_seed in such a child
    (a DataLoader worker) leaves the xdev generators alone, as torch.cuda does."""
    return _in_bad_fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_bad_fork)


def _lazy_init() -> None:
    """Called by torch before it makes a tensor on xdev (torch.ones(..., device="xdev"),
    tensor.to("xdev")), as for CUDA: refuses a forked child and claims the accelerator."""
    if _in_bad_fork:
        raise RuntimeError(
            "Cannot re-initialize xdev in forked subprocess. To use xdev with "
            "multiprocessing, you must use the 'spawn' start method (the xdev runtime's "
            "stream workers do not survive fork)")
    _C._claim_accelerator()


def init() -> None:
    """Make xdev this process's device: from now on torch's accelerator is xdev
    (torch.accelerator.is_available(), init_process_group() without a backend picks xccl).
    The runtime itself starts at its first use. Raises in a child forked after the import."""
    _lazy_init()


def is_initialized() -> bool:
    return _C._accelerator_claimed() and not _in_bad_fork


def get_amp_supported_dtype() -> list:
    """What ``torch.autocast("xdev", dtype=...)`` casts to: float16 and bfloat16, with CUDA's
    op lists and policies (csrc/torch_xdev/XdevAutocast.cpp); the ops then run the CPU
    kernels in that dtype. float32 is not an autocast dtype (as for CUDA's lists: torch warns
    and disables autocast)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 tensors and kernels exist on xdev (those of the CPU)."""
    return True


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    _C._set_device(_index(device))  # claims the accelerator (XdevFunctions.cpp)


class _XdevDeviceProperties:
    """What ``torch.xdev.get_device_properties(i)`` returns: the fields of
    ``torch.cuda.get_device_properties`` that mean something for a host-memory device."""

    def __init__(self, index: int, total_memory: int):
        self.index = index
        self.name = get_device_name(index)
        self.type = "xdev"
        self.total_memory = total_memory  # bytes: the runtime's capacity (XCCL_XDEV_MEMORY)
        # xdev computes on the host; its kernels are the CPU's, on the calling thread
        self.multi_processor_count = os.cpu_count() or 1
        self.is_integrated = True  # device memory is host memory

    def __repr__(self) -> str:
        return (f"_XdevDeviceProperties(name='{self.name}', index={self.index}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def get_device_name(device: _DeviceLike = None) -> str:
    idx = _index(device)
    return f"xdev simulated accelerator {idx} (host memory)"


def get_device_properties(device: _DeviceLike = None) -> _XdevDeviceProperties:
    idx = _index(device)
    return _XdevDeviceProperties(idx, mem_get_info(idx)[1])


class device:
    """Context manager that makes ``device`` current (like torch.cuda.device)."""

    def __init__(self, device: _DeviceLike):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc: Any) -> bool:
        if self.prev_idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of ``obj`` (a tensor) current."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "xdev" else -1)


def synchronize(device: _DeviceLike = None) -> None:
    """Wait for all work queued on every stream of ``device``; raises the first stream's
    error (a failed collective, a host function that threw)."""
    _C._synchronize(_index(device))


def clear_errors(device: _DeviceLike = None) -> None:
    """Forget the sticky errors of ``device``'s streams, so that work queued from now on runs.

    A collective that fails (a peer died, timed out, was aborted) fails the stream it was
    ordered on, and every stream that waited on it: from there on, synchronising, copying to
    the host or running an op on it raises ``torch.distributed.DistBackendError`` instead of
    handing back a buffer that was never reduced. A program that has dealt with the failure
    (destroyed or rebuilt its process group, reloaded its state) calls this to use the device
    again. CUDA has no such call: a faulted context needs a new process.
    """
    _C._clear_errors(_index(device))


class Stream(torch.Stream):
    """An xdev stream: an in-order work queue with its own worker thread.

    ``Stream(device=None, priority=0)`` takes a stream from the device's pool, as
    torch.cuda.Stream does. All torch.Stream methods work (query, synchronize, wait_event,
    wait_stream, record_event).
    """

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs: Any):
        if kwargs:  # rebuilding from (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("xdev", _index(device)),
                               priority=priority)

    def __init__(self, *args: Any, **kwargs: Any):  # torch.Stream does its work in __new__
        pass


class Event:
    """An xdev event: a position in a stream. ``Event(...)`` returns a ``torch.Event`` on the
    xdev device (not a subclass: torch.Event.elapsed_time accepts only torch.Event itself)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False, device: _DeviceLike = None) -> torch.Event:
        return torch.Event(device=torch.device("xdev", _index(device)),
                           enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: _DeviceLike = None) -> Stream:
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device: _DeviceLike = None) -> Stream:
    idx = _index(device)
    return Stream(stream_id=0, device_index=idx,
                  device_type=torch.accelerator.current_stream(idx).device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the current stream of its device (and its device current)."""
    if stream is None:
        return
    if stream.device.type != "xdev":
        raise ValueError(f"xdev.set_stream: expected an xdev stream, got one on {stream.device}")
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes ``stream`` current on its device, then restores both the
    previous stream of that device and the previous current device."""

    def __init__(self, stream: Optional[torch.Stream]):
        self.stream = stream
        self.prev_stream: Optional[torch.Stream] = None
        self.prev_device = -1

    def __enter__(self):
        if self.stream is None:
            return None
        if self.stream.device.type != "xdev":
            raise ValueError(
                f"xdev.stream: expected an xdev stream, got one on {self.stream.device}")
        self.prev_device = _C._current_device()
        self.prev_stream = torch.accelerator.current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)  # also makes its device current
        return self.stream

    def __exit__(self, *exc: Any) -> bool:
        if self.stream is None:
            return False
        torch.accelerator.set_stream(self.prev_stream)
        _C._set_device(self.prev_device)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    return StreamContext(stream)


# ---------------------------------------------------------------- random numbers

class _DefaultGenerators:
    def __getitem__(self, i: int) -> torch.Generator:
        return _C._default_generator(_index(i))

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    """Seed the current device's default generator."""
    default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in default_generators:
        g.manual_seed(int(seed))


def seed() -> None:
    default_generators[current_device()].seed()


def seed_all() -> None:
    s = default_generators[0].seed()
    for g in list(default_generators)[1:]:
        g.manual_seed(s)


def initial_seed() -> int:
    return default_generators[current_device()].initial_seed()


def get_rng_state(device: _DeviceLike = None) -> torch.Tensor:
    return default_generators[_index(device)].get_state()


def set_rng_state(state: torch.Tensor, device: _DeviceLike = None) -> None:
    default_generators[_index(device)].set_state(state)


def get_rng_state_all() -> list:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(states) -> None:
    for g, s in zip(default_generators, states):
        g.set_state(s)


# ---------------------------------------------------------------- memory

def memory_stats(device: _DeviceLike = None) -> dict:
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: _DeviceLike = None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: _DeviceLike = None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def empty_cache() -> None:
    """Return the cached, unused blocks of every device to the runtime (xdevFree)."""
    torch.accelerator.empty_cache()


def mem_get_info(device: _DeviceLike = None) -> tuple:
    """(free, total) bytes of the device, as the runtime reports them (XCCL_XDEV_MEMORY)."""
    return torch.accelerator.get_memory_info(_index(device))


def _sleep(ms: int) -> None:
    """Queue a ``ms`` millisecond sleep on the current stream (for tests, like
    torch.cuda._sleep)."""
    _C._sleep(int(ms))


_registered = False


def _builtin_accelerator() -> Optional[str]:
    """The accelerator this torch was built for ("cuda" for CUDA and ROCm, "xpu"), or None.

    A compile-time answer: asking whether a GPU is there would initialise its driver at
    ``import torch`` (the autoload runs this) and could spoil a later fork."""
    if torch.backends.cuda.is_built():
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and getattr(xpu, "_is_compiled", lambda: False)():
        return "xpu"
    return None


def _wanted() -> bool:
    """Whether this process registers xdev as torch's PrivateUse1 device.

    torch makes a registered PrivateUse1 device its accelerator, ahead of CUDA and XPU
    (``torch.accelerator.current_accelerator()``), and ``init_process_group(device_id=cuda:0)``
    then refuses the GPU. So on a torch built for CUDA, ROCm or XPU, xdev is registered only
    when asked for with ``TORCH_XCCL_ACCELERATOR=xdev``; the xccl backend serves cuda tensors
    without it (found on an H100, 2026-11-27: merely installing torch_xccl broke NCCL's
    ``device_id``). On a CPU-only torch it is always registered, and claimed at first use."""
    if os.environ.get("TORCH_XCCL_ACCELERATOR", "") == "xdev":
        return True
    return _builtin_accelerator() is None


def registered() -> bool:
    """Whether the xdev device is registered with torch in this process (see _wanted)."""
    return _registered


def _register() -> None:
    """Rename PrivateUse1 to "xdev" and install torch.xdev and the Tensor/Module helpers.
    Idempotent."""
    global _registered
    if _registered:
        return
    import sys

    name = torch._C._get_privateuse1_backend_name()
    if name != "xdev":
        if name != "privateuseone":
            raise RuntimeError(f"torch_xccl: PrivateUse1 is already taken by '{name}', "
                               "so the xdev device cannot be registered")
        torch.utils.rename_privateuse1_backend("xdev")
    module = sys.modules[__name__]
    if not hasattr(torch, "xdev"):
        torch._register_device_module("xdev", module)
    if not hasattr(torch.Tensor, "is_xdev"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    _registered = True
