"""Device-backend autoload for torch_xccl: `import torch` calls load() through the entry point
group "torch.backends" (pyproject.toml), so device="xdev" works without `import torch_xccl`.

A module of its own, outside the torch_xccl package, so that loading the entry point cannot
fail: torch turns any exception raised here into an ImportError of torch itself. A missing or
broken extension is reported as a warning and torch stays usable.
TORCH_DEVICE_BACKEND_AUTOLOAD=0 (torch's own switch) disables it.
"""


def load() -> None:
    try:
        import torch_xccl  # noqa: F401  (registers the xdev device and the xccl backend)
    except Exception as err:  # never break `import torch`
        import warnings

        warnings.warn(f"torch_xccl: the xdev device could not be registered at torch import "
                      f"({type(err).__name__}: {err}); `import torch_xccl` shows the full error")
