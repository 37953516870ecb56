"""Shared by the test_xdev_* files: the xdev device registered, and a subprocess runner."""
import os
import subprocess
import sys

import torch

import torch_xccl  # noqa: F401  (registers the xdev device)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code, env_extra=None, pythonpath=None, timeout=120):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess (text)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(pythonpath if pythonpath is not None else [ROOT])
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd="/")


