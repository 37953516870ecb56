"""Processes a test starts outside the harness (launchers, browsers, schedulers' stand-ins):
waiting for them under a hard timeout, and killing every one of them by a marker in its
environment, wherever it was re-parented (torchrun's workers start sessions of their own,
mpirun's ranks hang off its daemons, Chromium's helpers off its zygote)."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest


def kill_marked(name: str, marker: str) -> None:
    """SIGKILL every process (but this one) whose environment has name=marker."""
    needle = f"{name}={marker}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def finish(procs, timeout):
    """[(returncode, output)] of Popen objects (stdout=PIPE, stderr merged); the first timeout
    kills them all and fails the test with what each process had said."""
    outs = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            texts = [q.communicate(timeout=10)[0] for q in procs]
            pytest.fail(f"timed out after {timeout} s:\n" + "\n----\n".join(t[-3000:] for t in texts))
        outs.append((p.returncode, text))
    return outs
