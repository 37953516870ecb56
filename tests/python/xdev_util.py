"""Shared by the test_xdev_* files: the xdev device registered, and a subprocess runner."""
import os
import subprocess
import sys

# The tests use devices up to xdev:7 and the default 16G capacity; the runtime reads these
# once, at its first use in the process.
os.environ["XCCL_XDEV_COUNT"] = "8"
os.environ.pop("XCCL_XDEV_MEMORY", None)

import torch  # noqa: E402

import torch_xccl  # noqa: F401  (registers the xdev device)

torch.xdev.init()  # these tests use xdev: it is this process's accelerator from the start

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code, env_extra=None, pythonpath=None, timeout=120):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess (text)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(pythonpath if pythonpath is not None else [ROOT])
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd="/")


def fake_install(tmp_path, with_package=True):
    """A dist-info with the entry point, as `pip install` would write it."""
    dist = tmp_path / "torch_xccl-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_xccl\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[torch.backends]\nxdev = _torch_xccl_autoload:load\n")
    if not with_package:
        # An installed package whose extension is missing (shadows any other install).
        (tmp_path / "_torch_xccl_autoload.py").write_text(
            open(os.path.join(ROOT, "_torch_xccl_autoload.py")).read())
        (tmp_path / "torch_xccl").mkdir()
        (tmp_path / "torch_xccl" / "__init__.py").write_text(
            "raise ImportError('simulated: torch_xccl._xdev_C is missing')\n")
        return [str(tmp_path)]
    return [str(tmp_path), ROOT]
