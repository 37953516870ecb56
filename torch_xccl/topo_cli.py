"""The `xccl-topo` command: runs the xccl-topo program bundled with the package
(torch_xccl/bin/xccl-topo, built from tools/xccl-topo with the core library).

    xccl-topo                       this host's matrix and legend
    xccl-topo --dump                this host in XCCL_TOPO_FILE format
    xccl-topo rings --topo-file F --nranks N
    xccl-topo show --html out.html

docs/TOPOLOGY.md has the details.
"""
import os
import sys


def binary() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "xccl-topo")


def main() -> None:
    path = binary()
    if not os.access(path, os.X_OK):
        sys.exit(f"xccl-topo: {path} was not built (the package build needs CLI11: "
                 "apt install libcli11-dev, then reinstall torch_xccl)")
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
