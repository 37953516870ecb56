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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code, env_extra=None, pythonpath=None, timeout=120):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess (text)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(pythonpath if pythonpath is not None else [ROOT])
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd="/")


