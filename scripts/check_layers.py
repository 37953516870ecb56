#!/usr/bin/env python3
"""The layering check: every #include of a project file must point down the stack.

Run by scripts/lint.sh (so by CI) and by ctest (layers.IncludesPointDownTheStack). Each C/C++
file belongs to one layer by its folder; a layer may include itself and the layers listed
for it in ALLOWED, nothing else. Also refused anywhere: a parent-relative include ("../"),
which hides which layer a header belongs to. docs/ARCHITECTURE.md draws the same graph.

  python3 scripts/check_layers.py            # exit 1 and one line per offending include
  python3 scripts/check_layers.py --graph    # the include graph between layers, with counts
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (layer, folder prefix), first match wins: the more specific folders come first.
LAYERS = [
    ("xdev_api", "csrc/xdev/include/"),  # xdev_runtime.h, libxdev's public C API
    ("xdev", "csrc/xdev/"),              # libxdev: the simulated accelerator's runtime
    ("torch_xdev", "csrc/torch_xdev/"),       # _xdev_C: xdev as a torch device
    ("device", "csrc/collectives/device/"),     # the Device interface, host and CUDA devices
    ("api", "csrc/collectives/include/"),       # xccl.h, the public C API
    ("collectives", "csrc/collectives/"),       # libxccl: bootstrap, transports, algorithms
    ("common", "csrc/common/"),                 # errors, logging, knobs, shared memory
    ("backend", "csrc/process_group_xccl/"),    # _C: the c10d backend on libxccl
    ("net_plugin", "csrc/net_libfabric/"),      # a network plugin, built as a vendor's would be
    ("tools", "tools/"),
    ("tests", "tests/"),
    ("bench", "bench/"),
]

# Who may include whom (besides itself). Read bottom-up: common and the two public APIs
# include nothing of ours; libxdev sits on common alone (it never sees xccl.h); the devices
# implement the Device interface for libxccl with xccl.h's types and drive xdev through its
# public API; the collectives use common, xccl.h and the devices; the torch extensions and the
# tools use only the public headers of the libraries they link (the tools also the core's
# internals, which they link statically); a network plugin sees xccl.h and xccl_net.h only,
# as one built outside this tree would. Tests may include anything.
ALLOWED = {
    "common": set(),
    "api": set(),
    "xdev_api": set(),
    "xdev": {"common", "xdev_api"},
    "device": {"common", "api", "xdev_api"},
    "collectives": {"common", "api", "device"},
    "torch_xdev": {"xdev_api"},
    "backend": {"api", "xdev_api"},
    "net_plugin": {"api"},
    "tools": {"common", "api", "xdev_api", "device", "collectives"},
    "bench": {"common", "api", "xdev_api", "device", "collectives"},
    "tests": {"common", "api", "xdev_api", "xdev", "device", "collectives", "backend",
              "torch_xdev", "net_plugin"},
}

# Headers of an allowed layer that a layer still must not include: libxdev links common/'s
# static archive but not libxccl's logger (the one logging state of a process lives in
# libxccl; libxdev reports through csrc/xdev/report.h).
NOT_FROM = {
    "xdev": {"csrc/common/log.h": "libxccl's logger (libxdev reports through xdev/report.h)",
             "csrc/common/wait_notice.h": "it logs through libxccl's logger"},
}

# Where "..." and <...> includes are looked up, as the builds' include paths do.
SEARCH = ["csrc", "csrc/collectives/include", "csrc/xdev/include"]
SOURCE = re.compile(r"\.(c|cc|cpp|h|hpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(path: str) -> str | None:
    for name, prefix in LAYERS:
        if path.startswith(prefix):
            return name
    return None


def resolve(src: str, inc: str, quoted: bool, root: str = ROOT) -> str | None:
    """The project file an include names, or None for a system or third-party header."""
    bases = ([os.path.dirname(src)] if quoted else []) + SEARCH
    for base in bases:
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def scan(files: list[str], root: str = ROOT):
    problems, edges = [], collections.Counter()
    for src in files:
        me = layer_of(src)
        if me is None:
            continue
        with open(os.path.join(root, src), errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                quoted, inc = m.group(1) == '"', m.group(2)
                if inc.startswith("../"):
                    problems.append(f"{src}:{lineno}: '{inc}': a parent-relative include "
                                    "(name the header from csrc/, e.g. \"collectives/...\")")
                    continue
                target = resolve(src, inc, quoted, root)
                if target is None:
                    continue
                if target in NOT_FROM.get(me, {}):
                    problems.append(f"{src}:{lineno}: {me} includes {target}: "
                                    f"{NOT_FROM[me][target]}")
                    continue
                them = layer_of(target)
                if them is None or them == me:
                    continue
                edges[(me, them)] += 1
                if them not in ALLOWED[me]:
                    problems.append(f"{src}:{lineno}: {me} includes {target} ({them}); {me} may "
                                    f"include only {sorted(ALLOWED[me]) or 'nothing of ours'}")
    return problems, edges


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", action="store_true", help="print the include graph between layers")
    a = ap.parse_args()
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (an sdist): walk the tree instead
        files = [os.path.relpath(os.path.join(d, f), ROOT)
                 for d, _, fs in os.walk(ROOT) for f in fs]
    else:
        files = out.stdout.split()
    files = sorted(f for f in files if SOURCE.search(f))
    problems, edges = scan(files)
    if a.graph:
        for (x, y), n in sorted(edges.items()):
            print(f"{x:12s} -> {y:12s} {n:4d}")
    for p in problems:
        print("layers:", p)
    print(f"layers: {len(files)} files, {sum(edges.values())} includes across layers, "
          f"{len(problems)} wrong-way")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
