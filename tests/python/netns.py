"""Simulated hosts for tests: network namespaces joined by a veth pair (root only).

    with two_hosts() as hosts:        # hosts[i].name, hosts[i].addr, hosts[i].iface
        hosts[0].run([...])           # a command inside host 0's namespace (Popen)

The namespaces and links are removed on exit, also when the test fails. Addresses are in
10.231.0.0/24 and exist only inside the namespaces the test made.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess


def available() -> str:
    """'' when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    return ""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@dataclasses.dataclass
class Host:
    name: str
    addr: str
    iface: str

    def popen(self, cmd, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name, *cmd], **kw)


@contextlib.contextmanager
def two_hosts(tag: str = ""):
    base = f"xt{os.getpid() % 100000}{tag}"
    hosts = [Host(f"{base}a", "10.231.0.1", "xa0"), Host(f"{base}b", "10.231.0.2", "xb0")]
    try:
        for h in hosts:
            _ip("netns", "add", h.name)
            _ip("-n", h.name, "link", "set", "lo", "up")
        _ip("link", "add", hosts[0].iface, "netns", hosts[0].name, "type", "veth", "peer",
            "name", hosts[1].iface, "netns", hosts[1].name)
        for h in hosts:
            _ip("-n", h.name, "addr", "add", f"{h.addr}/24", "dev", h.iface)
            _ip("-n", h.name, "link", "set", h.iface, "up")
        yield hosts
    finally:
        for h in hosts:
            subprocess.run(["ip", "netns", "del", h.name], capture_output=True, timeout=20)
