"""PyTorch Lightning on xdev: an accelerator and two strategies, registered by name.

    import torch_xccl.integrations.lightning  # registers the names below
    trainer = pl.Trainer(accelerator="xdev", devices=2, strategy="ddp_xdev",
                         precision="bf16-mixed")      # or "32-true", "16-mixed"

* ``accelerator="xdev"`` -- :class:`XdevAccelerator`: devices are ``xdev:0 ..``
  (``devices=N``, a list of indices, ``-1`` or ``"auto"`` = every xdev device).
* ``strategy="ddp_xdev"`` -- :class:`XdevDDPStrategy`: Lightning's DDP over the xccl backend.
  Lightning's own ``"ddp"`` builds DDP inside ``torch.cuda.Stream()`` for every accelerator
  that has device ids, which fails without CUDA; this one uses an xdev side stream (and
  orders the current stream after it). Lightning picks ``"ddp"`` itself for ``devices > 1``,
  so name this strategy.
* ``strategy="single_xdev"`` -- :class:`XdevSingleDeviceStrategy`: one device (Lightning's
  automatic choice for one device of an accelerator it does not know is the cpu).

Mixed precision: Lightning makes ``MixedPrecision(..., device="cuda")`` for any accelerator
other than cpu and mps; both strategies turn it into the same plugin on ``"xdev"``
(``torch.autocast("xdev")``, and ``torch.amp.GradScaler("xdev")`` for ``"16-mixed"``).

Works with ``pytorch_lightning`` and with ``lightning.pytorch`` (whichever is installed; both
get the names). Importing this module without Lightning installed registers nothing.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from . import client_available

PACKAGES = ("pytorch_lightning", "lightning.pytorch")
ACCELERATOR = "xdev"
DDP = "ddp_xdev"
SINGLE = "single_xdev"

_built: dict[str, dict[str, type]] = {}


def _parse_devices(devices: Any) -> list[int]:
    import torch

    count = torch.xdev.device_count()
    if devices in ("auto", -1, "-1"):
        return list(range(count))
    if isinstance(devices, str):
        devices = devices.strip()
        if devices.endswith(","):
            return [int(devices[:-1])]
        if "," in devices:
            devices = [int(d) for d in devices.split(",") if d.strip()]
        else:
            devices = int(devices)
    if isinstance(devices, int):
        if devices < 0 or devices > count:
            raise ValueError(f"xdev: devices={devices}, but there are {count} xdev devices "
                             "(XCCL_XDEV_COUNT sets how many)")
        return list(range(devices))
    indices = [int(d) for d in devices]
    bad = [d for d in indices if not 0 <= d < count]
    if bad:
        raise ValueError(f"xdev: device indices {bad} out of range 0..{count - 1}")
    return indices


def _xdev_precision(plugin):
    """Lightning's MixedPrecision made for "cuda" -> the same plugin on "xdev"."""
    import torch

    cls = type(plugin)
    if getattr(plugin, "device", None) != "cuda" or cls.__name__ != "MixedPrecision":
        return plugin
    scaler = torch.amp.GradScaler("xdev") if plugin.precision == "16-mixed" else None
    return cls(plugin.precision, device="xdev", scaler=scaler)


def _build(package: str) -> dict[str, type]:
    if package in _built:
        return _built[package]
    import torch

    import torch_xccl  # noqa: F401  (registers xdev, routes "xccl")

    accelerators = importlib.import_module(f"{package}.accelerators")
    strategies = importlib.import_module(f"{package}.strategies")
    Accelerator = accelerators.Accelerator

    class XdevAccelerator(Accelerator):
        """Lightning accelerator for the xdev device (torch_xccl)."""

        def setup_device(self, device: torch.device) -> None:
            if device.type != "xdev":
                raise ValueError(f"XdevAccelerator: device should be xdev, got {device}")
            torch.xdev.set_device(device)  # also makes xdev this process's accelerator

        def get_device_stats(self, device) -> dict[str, Any]:
            return torch.xdev.memory_stats(device)

        def teardown(self) -> None:
            torch.xdev.empty_cache()

        @staticmethod
        def parse_devices(devices: Any) -> list[int]:
            return _parse_devices(devices)

        @staticmethod
        def get_parallel_devices(devices: Any) -> list[torch.device]:
            return [torch.device("xdev", i) for i in _parse_devices(devices)]

        @staticmethod
        def auto_device_count() -> int:
            return torch.xdev.device_count()

        @staticmethod
        def is_available() -> bool:
            return torch.xdev.device_count() > 0

        @staticmethod
        def name() -> str:
            return ACCELERATOR

        @classmethod
        def register_accelerators(cls, accelerator_registry) -> None:
            accelerator_registry.register(ACCELERATOR, cls, description=cls.__name__)

    class _XdevPrecision:
        """Mixed precision made for "cuda" by Lightning's connector runs on "xdev"."""

        @property
        def precision_plugin(self):
            return super().precision_plugin

        @precision_plugin.setter
        def precision_plugin(self, plugin) -> None:
            self._precision_plugin = _xdev_precision(plugin) if plugin is not None else None

    class XdevDDPStrategy(_XdevPrecision, strategies.DDPStrategy):
        """Lightning's DDP on xdev over xccl."""

        strategy_name = DDP

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("accelerator", XdevAccelerator())
            kwargs.setdefault("process_group_backend", "xccl")
            super().__init__(*args, **kwargs)

        def _setup_model(self, model):
            from torch.nn.parallel import DistributedDataParallel

            device_ids = self.determine_ddp_device_ids()
            # DDP is built on a side stream, as Lightning does on CUDA; the current stream
            # then waits for it, so nothing reads the broadcast parameters too early.
            side = torch.xdev.Stream(self.root_device)
            with torch.xdev.stream(side):
                ddp = DistributedDataParallel(module=model, device_ids=device_ids,
                                              **self._ddp_kwargs)
            torch.xdev.current_stream(self.root_device).wait_stream(side)
            return ddp

        @classmethod
        def register_strategies(cls, strategy_registry) -> None:
            strategy_registry.register(DDP, cls, description="DDP on xdev over xccl",
                                       start_method="popen")

    class XdevSingleDeviceStrategy(_XdevPrecision, strategies.SingleDeviceStrategy):
        """One xdev device."""

        strategy_name = SINGLE

        def __init__(self, device: Any = "xdev:0", *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("accelerator", XdevAccelerator())
            super().__init__(device, *args, **kwargs)

        @classmethod
        def register_strategies(cls, strategy_registry) -> None:
            strategy_registry.register(SINGLE, cls, description="one xdev device")

    XdevAccelerator.register_accelerators(accelerators.AcceleratorRegistry)
    XdevDDPStrategy.register_strategies(strategies.StrategyRegistry)
    XdevSingleDeviceStrategy.register_strategies(strategies.StrategyRegistry)
    _built[package] = {"XdevAccelerator": XdevAccelerator, "XdevDDPStrategy": XdevDDPStrategy,
                       "XdevSingleDeviceStrategy": XdevSingleDeviceStrategy}
    return _built[package]


def _installed_packages() -> list[str]:
    found = []
    for package in PACKAGES:
        top = package.split(".")[0]
        if client_available(top):
            try:
                if importlib.util.find_spec(package) is not None:
                    found.append(package)
            except ModuleNotFoundError:
                pass
    return found


def register() -> list[str]:
    """Register ``accelerator="xdev"``, ``strategy="ddp_xdev"`` and ``"single_xdev"`` with
    every installed Lightning; returns the packages registered (none without Lightning)."""
    return [p for p in _installed_packages() if _build(p)]


def classes(package: str = "pytorch_lightning") -> dict[str, type]:
    """The classes registered for ``package`` (XdevAccelerator, XdevDDPStrategy,
    XdevSingleDeviceStrategy), for passing instances instead of names."""
    return _build(package)


REGISTERED = register()

__all__ = ["register", "classes", "REGISTERED", "ACCELERATOR", "DDP", "SINGLE"]
