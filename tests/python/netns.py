"""Simulated hosts for tests: network namespaces on one switch (root only).

    with hosts(3) as hs:              # hs[i].name, hs[i].addr (10.231.0.<i+1>), hs[i].iface
        hs[0].popen([...])            # a command inside host 0's namespace (Popen)
    with hosts(2, ipv6=True) as hs:   # also hs[i].addr6, fd31::<i+1>/64 on the same link

hosts(n) makes n namespaces, one per host, and one more, the switch, holding a Linux bridge;
each host has a veth pair: one end (`iface`, address 10.231.0.<i+1>/24) in the host's
namespace, the other enslaved to the bridge in the switch's. two_hosts() is hosts(2) with the
two hosts joined directly by one veth pair (no switch), the topology bench_two_hosts.py
measures.

Every namespace (and with it every link and the bridge) is removed on exit, also when the
set-up or the test fails. Addresses are in 10.231.0.0/24 and exist only inside the host
namespaces the test made; the switch has none.
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
    addr6: str = ""  # hosts(ipv6=True): fd31::<i+1>

    def popen(self, cmd, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name, *cmd], **kw)


@contextlib.contextmanager
def hosts(n: int, tag: str = "", switch: bool = True, ipv6: bool = False):
    """n hosts (namespaces) 10.231.0.1 .. 10.231.0.n on a bridge in a switch namespace;
    switch=False (n == 2 only) joins the two by one veth pair instead. ipv6=True adds the
    unique-local addresses fd31::1 .. fd31::n (no duplicate-address wait: usable at once)."""
    if not 2 <= n <= 26:
        raise ValueError(f"hosts({n}): 2 to 26 hosts")
    if not switch and n != 2:
        raise ValueError("hosts(switch=False) joins exactly two hosts")
    base = f"xt{os.getpid() % 100000}{tag}"
    letters = [chr(ord("a") + i) for i in range(n)]
    hs = [Host(f"{base}{c}", f"10.231.0.{i + 1}", f"x{c}0", f"fd31::{i + 1}" if ipv6 else "")
          for i, c in enumerate(letters)]
    sw = f"{base}sw"  # host names end in one letter, so never this
    made = []  # namespaces to remove, in creation order
    try:
        for h in hs:
            _ip("netns", "add", h.name)
            made.append(h.name)
            _ip("-n", h.name, "link", "set", "lo", "up")
        if switch:
            _ip("netns", "add", sw)
            made.append(sw)
            _ip("-n", sw, "link", "add", "br0", "type", "bridge")  # STP off: forwards at once
            _ip("-n", sw, "link", "set", "br0", "up")
            for h, c in zip(hs, letters):
                # created inside the namespaces directly: no name ever exists in the caller's
                _ip("link", "add", h.iface, "netns", h.name, "type", "veth", "peer",
                    "name", f"s{c}0", "netns", sw)
                _ip("-n", sw, "link", "set", f"s{c}0", "master", "br0")
                _ip("-n", sw, "link", "set", f"s{c}0", "up")
        else:
            _ip("link", "add", hs[0].iface, "netns", hs[0].name, "type", "veth", "peer",
                "name", hs[1].iface, "netns", hs[1].name)
        for h in hs:
            _ip("-n", h.name, "addr", "add", f"{h.addr}/24", "dev", h.iface)
            if ipv6:
                _ip("-n", h.name, "addr", "add", f"{h.addr6}/64", "dev", h.iface, "nodad")
            _ip("-n", h.name, "link", "set", h.iface, "up")
        yield hs
    finally:
        for name in reversed(made):  # a namespace's veth ends (and the bridge) go with it
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)


@contextlib.contextmanager
def two_hosts(tag: str = "", ipv6: bool = False):
    """hosts(2) joined directly by one veth pair: 10.231.0.1 (iface xa0), 10.231.0.2 (xb0)."""
    with hosts(2, tag, switch=False, ipv6=ipv6) as hs:
        yield hs
