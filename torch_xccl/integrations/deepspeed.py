"""DeepSpeed on xdev: an accelerator class for ``deepspeed.accelerator.set_accelerator``.

DeepSpeed finds accelerators only by built-in name (``DS_ACCELERATOR`` accepts a fixed list)
or through ``set_accelerator(obj)``. ``install()`` does the latter, before the engine is made::

    import deepspeed
    from torch_xccl.integrations.deepspeed import install
    install()                       # DeepSpeed now drives xdev:LOCAL_RANK over xccl
    engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)

The accelerator is stream-ordered like CUDA's (``is_synchronized_device() is False``):
DeepSpeed's side streams, events and timers are xdev streams and events. Communication is
``"xccl"``. No DeepSpeed native op is built for xdev (``DS_BUILD_OPS=0`` installs work): use
torch optimizers (a client optimizer or ``"torch_adam": true``); the host-side ops of
ZeRO-Offload (CPU Adam, Adagrad, Lion, async I/O) are the CPU ones.

Importing this module does not import DeepSpeed; making the class does.
"""
from __future__ import annotations

import functools
import os

from . import require

_CLASS = None

# The host-side builders DeepSpeed's CPU accelerator provides; they work on CPU tensors, which
# is where ZeRO-Offload keeps optimizer state. Anything else has no xdev build.
_HOST_BUILDERS = ("CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder", "AsyncIOBuilder")


def _typed_tensor(dtype):
    """A legacy constructor property (accelerator.FloatTensor(...)): torch.tensor on xdev."""
    import torch
    return property(lambda self: functools.partial(torch.tensor, dtype=dtype, device="xdev"))


def _make_class():
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    require("deepspeed")
    import torch
    from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator

    import torch_xccl  # noqa: F401  (registers xdev and routes "xccl")

    xdev = torch.xdev

    class XdevAccelerator(DeepSpeedAccelerator):
        """DeepSpeed's accelerator interface over ``torch.xdev`` and the xccl backend."""

        def __init__(self):
            super().__init__()
            self._name = "xdev"
            self._communication_backend_name = "xccl"
            self._compile_backend = "inductor"
            xdev.init()  # choosing xdev for DeepSpeed is using it: torch's accelerator is xdev

        # ---- execution model: asynchronous streams, as CUDA
        def is_synchronized_device(self):
            return False

        def use_host_timers(self):
            return self.is_synchronized_device()

        def resolves_data_dependency(self):
            return self.is_synchronized_device()

        def handles_memory_backpressure(self):
            return self.is_synchronized_device()

        # ---- devices
        def device_name(self, device_index=None):
            return "xdev" if device_index is None else f"xdev:{device_index}"

        def device(self, device_index=None):
            return xdev.device(device_index)

        def set_device(self, device_index):
            xdev.set_device(device_index)

        def current_device(self):
            return xdev.current_device()

        def current_device_name(self):
            return f"xdev:{xdev.current_device()}"

        def device_count(self):
            return xdev.device_count()

        def synchronize(self, device_index=None):
            xdev.synchronize(device_index)

        # ---- random numbers
        def random(self):
            return torch.random

        def set_rng_state(self, new_state, device_index=None):
            xdev.set_rng_state(new_state, device_index)

        def get_rng_state(self, device_index=None):
            return xdev.get_rng_state(device_index)

        def manual_seed(self, seed):
            xdev.manual_seed(seed)

        def manual_seed_all(self, seed):
            xdev.manual_seed_all(seed)

        def initial_seed(self):
            return xdev.initial_seed()

        def default_generator(self, device_index):
            return xdev.default_generators[device_index]

        # ---- streams and events
        @property
        def Stream(self):
            return xdev.Stream

        def stream(self, stream):
            return xdev.stream(stream)

        def current_stream(self, device_index=None):
            return xdev.current_stream(device_index)

        def default_stream(self, device_index=None):
            return xdev.default_stream(device_index)

        @property
        def Event(self):
            return xdev.Event

        # ---- memory (the caching allocator's statistics)
        def empty_cache(self):
            xdev.empty_cache()

        def memory_allocated(self, device_index=None):
            return xdev.memory_allocated(device_index)

        def max_memory_allocated(self, device_index=None):
            return xdev.max_memory_allocated(device_index)

        def reset_max_memory_allocated(self, device_index=None):
            xdev.reset_peak_memory_stats(device_index)

        def memory_cached(self, device_index=None):
            return xdev.memory_reserved(device_index)

        def max_memory_cached(self, device_index=None):
            return xdev.max_memory_reserved(device_index)

        def reset_max_memory_cached(self, device_index=None):
            xdev.reset_peak_memory_stats(device_index)

        def memory_stats(self, device_index=None):
            return xdev.memory_stats(device_index)

        def reset_peak_memory_stats(self, device_index=None):
            xdev.reset_peak_memory_stats(device_index)

        def memory_reserved(self, device_index=None):
            return xdev.memory_reserved(device_index)

        def max_memory_reserved(self, device_index=None):
            return xdev.max_memory_reserved(device_index)

        def total_memory(self, device_index=None):
            return xdev.mem_get_info(device_index)[1]

        def available_memory(self, device_index=None):
            return xdev.mem_get_info(device_index)[0]

        # ---- dtypes: the CPU kernels run on xdev memory
        def is_bf16_supported(self):
            return True

        def is_fp16_supported(self):
            return True

        def supported_dtypes(self):
            return [torch.float, torch.half, torch.bfloat16]

        # ---- misc
        def is_available(self):
            return xdev.device_count() > 0

        def range_push(self, msg, domain=None, category=None):
            return None  # no profiler ranges on xdev

        def range_pop(self, domain=None):
            return None

        def lazy_call(self, callback):
            return callback()

        def communication_backend_name(self):
            return self._communication_backend_name

        def is_triton_supported(self):
            return False

        # ---- graphs: xdev has no graph capture; run eagerly
        def create_graph(self):
            return None

        def capture_to_graph(self, graph, pool=None, stream=None):
            from deepspeed.runtime.utils import noop_context

            return noop_context()

        def replay_graph(self, graph):
            return None

        # ---- legacy typed-tensor constructors, on xdev
        BFloat16Tensor = _typed_tensor(torch.bfloat16)
        ByteTensor = _typed_tensor(torch.uint8)
        DoubleTensor = _typed_tensor(torch.double)
        FloatTensor = _typed_tensor(torch.float)
        HalfTensor = _typed_tensor(torch.half)
        IntTensor = _typed_tensor(torch.int)
        LongTensor = _typed_tensor(torch.long)

        # pinned host memory comes from the xdev host allocator (tensor.pin_memory())

        def on_accelerator(self, tensor):
            return tensor.device.type == "xdev"

        # ---- native ops: none are built for xdev
        def op_builder_dir(self):
            return "deepspeed.ops.op_builder.cpu"

        def create_op_builder(self, op_name):
            builder = self.get_op_builder(op_name)
            return builder() if builder is not None else None

        def get_op_builder(self, class_name):
            from deepspeed.ops.op_builder import cpu as host_builders

            if class_name in _HOST_BUILDERS:
                return getattr(host_builders, class_name)
            return host_builders.NotImplementedBuilder

        def build_extension(self):
            from torch.utils.cpp_extension import BuildExtension

            return BuildExtension

        def export_envs(self):
            return ["XCCL", "TORCH_XCCL"]  # prefixes DeepSpeed's multi-node launcher forwards

        def visible_devices_envs(self):
            # DeepSpeed's launcher writes the local device list here; the xdev runtime does not
            # read it (every process sees XCCL_XDEV_COUNT devices and picks LOCAL_RANK's).
            return ["XDEV_VISIBLE_DEVICES"]

        def set_visible_devices_envs(self, current_env, local_accelerator_ids):
            for env in self.visible_devices_envs():
                current_env[env] = ",".join(map(str, local_accelerator_ids))

        def get_compile_backend(self):
            return self._compile_backend

        def set_compile_backend(self, backend):
            supported = torch._dynamo.list_backends(exclude_tags=())
            if backend not in supported:
                raise ValueError(f"{backend} is not a torch.compile backend: {supported}")
            self._compile_backend = backend

    _CLASS = XdevAccelerator
    return _CLASS


def __getattr__(name):  # XdevAccelerator is made on first access (DeepSpeed imported then)
    if name == "XdevAccelerator":
        return _make_class()
    raise AttributeError(name)


def install(local_rank: int | None = None):
    """Make DeepSpeed use xdev: ``set_accelerator(XdevAccelerator())`` and select the
    process's device (``LOCAL_RANK``, as DeepSpeed's launcher and torchrun set it). Returns
    the accelerator. Call it before ``deepspeed.initialize`` / ``deepspeed.init_distributed``."""
    from deepspeed.accelerator import set_accelerator

    accel = _make_class()()
    set_accelerator(accel)
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    accel.set_device(local_rank % max(1, accel.device_count()))
    return accel


__all__ = ["install", "XdevAccelerator"]  # noqa: F822 (module __getattr__ makes it)
