"""Small adapters that let third-party training stacks use the xdev device and the xccl
backend without changes to their code (docs/INTEGRATIONS.md).

Each module is pure Python and imports its client lazily: importing
``torch_xccl.integrations.<client>`` works whether or not the client is installed, and only
the functions that need the client import it (raising an ImportError that names the package).

* ``lightning``  -- ``Trainer(accelerator="xdev", strategy="ddp_xdev")`` (PyTorch Lightning)
* ``deepspeed``  -- ``XdevAccelerator`` for ``deepspeed.accelerator.set_accelerator``
* ``accelerate`` -- what accelerate and the transformers Trainer need to run on xdev
"""
import importlib.util


def client_available(name: str) -> bool:
    """Whether the client package ``name`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder refused it, or a half-imported module
        return False


def require(name: str, pip_name: str = "") -> None:
    if not client_available(name):
        raise ImportError(f"torch_xccl.integrations: this needs the '{pip_name or name}' package "
                          f"(pip install {pip_name or name})")
