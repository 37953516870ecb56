"""What the bench scripts (and scripts/, tests/python/harness.py) share. Standard library only:
importing it starts nothing and needs no torch.

A script run by path (`python3 bench/X.py`, `python3 scripts/X.py`) has its own folder on
sys.path, not the repository root; after its imports come always these two lines:

    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
    from bench import util  # noqa: E402

and it imports any other bench module as `from bench.bench_torch import launch`. Appended, not
prepended: the root must not shadow the installed torch_xccl with the source tree.
"""
from __future__ import annotations

import json
import os
import random
import socket
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")  # where results go by default
TESTS_PY = os.path.join(REPO, "tests", "python")  # the plugin tests' helpers (harness, netns)


_pick = random.SystemRandom()  # not the module's generator: forked processes share its state


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to connect() and bind(0) (Linux: 32768)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT, a store, a URL).

    Chosen at random below the kernel's ephemeral range and checked by a bind: a port from
    bind(0) is in that range, where every outgoing connection of the machine also takes its
    local port, so in the moment between this check and the server's own bind a client
    socket of a test running beside this one could take it (EADDRINUSE, seen in CI)."""
    low = _ephemeral_low()
    if low > 11000:
        for _ in range(64):
            port = _pick.randrange(10000, low)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                    return port
                except OSError:
                    continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_bytes(s) -> int:
    """"64K", "4M", "1G", "512", "16MB" -> bytes (K, M, G are powers of 1024)."""
    s = str(s).strip().upper().rstrip("B")
    mult = 1
    for suf, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(suf):
            s, mult = s[:-1], m
            break
    return int(float(s) * mult)


def fmt_bytes(n: int) -> str:
    """The inverse for whole units: 65536 -> "64KiB", 1000 -> "1000B"."""
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return f"{n}B"


def use_test_helpers() -> None:
    """Makes the tests' helper modules (harness, netns, workers_*) importable by their plain
    names, as the tests import them: tests/python is not a package."""
    if TESTS_PY not in sys.path:
        sys.path.insert(0, TESTS_PY)


def result_path(json_arg: str | None, name: str) -> str:
    """--json when given, else bench/results/<name>.json."""
    return json_arg or os.path.join(RESULTS, name + ".json")


def write_json(path: str, obj) -> str:
    """Writes obj to path (indent 1, creating the folder) and returns path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
    return path
