"""accelerate (and the transformers Trainer, which runs on it) on xdev.

accelerate knows its devices from a fixed list (cuda, xpu, npu, mlu, ...). An unknown device
can only be named through its own environment variable ``ACCELERATE_TORCH_DEVICE``, and only
in its host-style process model (``cpu=True``: one process per rank, DDP without device ids,
no CUDA calls), whose backend it forces to gloo unless the process group already exists. So
:func:`use_xdev` does, before accelerate looks:

1. selects this process's xdev device (``LOCAL_RANK``), which makes xdev torch's accelerator;
2. sets ``ACCELERATE_TORCH_DEVICE=xdev:<i>``;
3. creates the default process group with ``"xccl"`` (without a launcher: a world of one),
   which accelerate then keeps;
4. creates accelerate's ``PartialState(cpu=True)``, so that an unchanged ``Accelerator()``
   takes that process model with the xdev device.

accelerate scripts: call it first, or leave them unchanged and run them through this module::

    torchrun --nproc_per_node=2 -m torch_xccl.integrations.accelerate train.py ...

transformers ``Trainer``: call it first *and* pass ``TrainingArguments(use_cpu=True, ...)``
(the Trainer rebuilds accelerate's state from its arguments; ``use_cpu`` selects the
host-style process model, the device stays xdev:<i>). Do not set ``ACCELERATE_USE_CPU``:
accelerate re-reads it at every ``AcceleratorState()`` and refuses it with a non-cpu device.

Mixed precision: ``Accelerator(mixed_precision="bf16")`` / ``TrainingArguments(bf16=True)``
autocast on xdev. fp16 needs a GradScaler, which accelerate makes only for devices it knows:
use bf16 with accelerate.
"""
from __future__ import annotations

import os
import sys


def use_xdev(local_rank: int | None = None, init_process_group: bool = True,
             backend: str = "xccl", partial_state: bool = True):
    """Prepare this process so that accelerate (and transformers) run on xdev; see the module
    docstring. Returns the device."""
    import torch
    import torch.distributed as dist

    import torch_xccl  # noqa: F401  (registers xdev and routes "xccl")

    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    index = local_rank % max(1, torch.xdev.device_count())
    torch.xdev.set_device(index)
    device = torch.device("xdev", index)
    os.environ["ACCELERATE_TORCH_DEVICE"] = str(device)
    if init_process_group and not dist.is_initialized():
        # without a launcher, a world of one: accelerate then takes the same path as under
        # torchrun (with no group it treats one process as "no distribution", where the
        # transformers Trainer puts the inputs on the cpu and the model on xdev)
        import socket

        for key, value in (("RANK", "0"), ("LOCAL_RANK", str(local_rank)), ("WORLD_SIZE", "1"),
                           ("LOCAL_WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
            os.environ.setdefault(key, value)
        if "MASTER_PORT" not in os.environ:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
        dist.init_process_group(backend)
    if partial_state:
        from accelerate import PartialState

        PartialState(cpu=True)
    return device


def main(argv: list[str] | None = None) -> None:
    """``python -m torch_xccl.integrations.accelerate SCRIPT [ARGS...]``: use_xdev(), then run
    SCRIPT as ``__main__`` with ARGS, unchanged."""
    import runpy

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if argv else 2)
    use_xdev()
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()

__all__ = ["use_xdev", "main"]
