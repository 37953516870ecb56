"""torch.xdev: the host-memory simulated accelerator "xdev" as a PyTorch device.

``import torch_xccl`` (or ``import torch`` alone, through the device-backend autoload entry
point) renames PrivateUse1 to "xdev" and registers this module as ``torch.xdev``::

    x = torch.ones(3, device="xdev:1")
    with torch.xdev.device(1), torch.xdev.stream(torch.xdev.Stream()):
        y = x * 2

Device, stream and event handling is torch's own device-generic machinery (torch.Stream,
torch.Event, torch.accelerator) over the xdev guard registered by ``torch_xccl._xdev_C``;
this module adds the CUDA-like names. See docs/XDEV_TORCH.md.
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
    return _C._device_count() > 0


def is_initialized() -> bool:
    return True


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


def init() -> None:
    """Nothing to do: the runtime starts on first use."""


def get_amp_supported_dtype() -> list:
    """What ``torch.autocast("xdev")`` may cast to. xdev has no lower-precision kernels (each op
    runs the CPU kernel in its own dtype), so only float32: ``torch.autocast("xdev",
    enabled=False)`` works, and asking for float16/bfloat16 makes torch warn and disable
    autocast rather than pretend."""
    return [torch.float32]


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    _C._set_device(_index(device))


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
    """Wait for all work queued on every stream of ``device``."""
    torch.accelerator.synchronize(_index(device))


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
