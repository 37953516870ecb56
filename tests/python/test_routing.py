"""backend="xccl" reaches torch_xccl on stock torch (2.13 CPU here; written for 2.11 too).

Each case runs in a fresh interpreter (routing is process-global state), with a hard timeout.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from harness import REPO, free_port

TIMEOUT = 90


def run_py(code, env_extra=None):
    env = dict(os.environ)
    env.pop("TORCH_XCCL_OVERRIDE_BUILTIN", None)
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


@pytest.mark.timeout(TIMEOUT + 10)
def test_xccl_name_routes_to_torch_xccl():
    out = run_py(f"""
        import torch, torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
        import torch_xccl
        assert torch_xccl._routing.BUILTIN_XCCL_AVAILABLE is False, \
            "this test expects a torch without its own XCCL"
        assert torch_xccl.is_routed()
        # "xccl" reaches torch_xccl, and the public availability answers say so
        assert dist.is_xccl_available() is True and dist.is_backend_available("xccl")
        assert dist.Backend("xccl") == "xccl" == dist.Backend("XCCL") == dist.Backend.XCCL
        assert c10d.BackendConfig(dist.Backend("xccl")).get_device_backend_map() == {{"cpu": "xccl", "xdev": "xccl", "cuda": "xccl"}}
        assert c10d.Backend.default_device_backend_map["cpu"] == "gloo"  # untouched
        assert c10d.Backend.default_device_backend_map["xdev"] == "xccl"
        dist.init_process_group("xccl", init_method="tcp://127.0.0.1:{free_port()}",
                                rank=0, world_size=1)
        assert dist.get_backend() == "xccl"
        assert torch_xccl.is_torch_xccl_backend()
        assert "ProcessGroupXCCL(rank=0, size=1" in torch_xccl.describe()
        t = torch.ones(4); dist.all_reduce(t); assert t.tolist() == [1.0] * 4
        g = dist.new_group(backend="xccl")
        assert dist.get_backend(g) == "xccl" and torch_xccl.is_torch_xccl_backend(g)
        g2 = dist.new_group(backend="cpu:xccl")
        assert torch_xccl.is_torch_xccl_backend(g2)
        t = torch.ones(2); dist.all_reduce(t, group=g2); assert t.tolist() == [1.0, 1.0]
        # a gloo group next to it is still gloo
        g3 = dist.new_group(backend="gloo")
        assert dist.get_backend(g3) == "gloo" and not torch_xccl.is_torch_xccl_backend(g3)
        dist.barrier()
        dist.destroy_process_group()
        print("ROUTED", torch_xccl.__version__, torch_xccl.xccl_version())
    """)
    assert "ROUTED 0.1.0" in out


def test_one_version_everywhere():
    """xccl.h is the one version source: the package, its metadata, the library it loads and
    CMake's project version all say the same."""
    import importlib.metadata
    import re

    import torch_xccl

    header = open(os.path.join(REPO, "csrc", "collectives", "include", "xccl.h")).read()
    parts = dict(re.findall(r"^#define XCCL_(MAJOR|MINOR|PATCH) (\d+)$", header, re.M))
    want = f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    assert torch_xccl.__version__ == want
    assert torch_xccl.xccl_version() == want
    assert importlib.metadata.version("torch_xccl") == want
    for path in ("CMakeLists.txt", "setup.py", "pyproject.toml", "torch_xccl/__init__.py"):
        text = open(os.path.join(REPO, path)).read()
        assert want not in text, f"{path} writes the version itself; read it from xccl.h"


# These simulate torch's own XCCL before torch_xccl is imported, so the device-extension
# autoload (which imports torch_xccl inside `import torch`) is off for them.
NO_AUTOLOAD = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}

SIMULATE_BUILTIN = """
    import warnings
    import torch.distributed.distributed_c10d as c10d
    # simulate a torch build that ships its own XCCL (Intel XPU)
    c10d._XCCL_AVAILABLE = True
    sentinel = type("TorchOwnProcessGroupXCCL", (), {})
    c10d.ProcessGroupXCCL = sentinel
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch_xccl
    msgs = [str(w.message) for w in caught if "torch_xccl" in str(w.message)]
    assert any("TORCH_XCCL_OVERRIDE_BUILTIN" in m for m in msgs), msgs
"""


@pytest.mark.timeout(TIMEOUT + 10)
def test_builtin_xccl_is_not_hijacked_silently():
    out = run_py(SIMULATE_BUILTIN + """
    assert not torch_xccl.is_routed()
    assert c10d.ProcessGroupXCCL is sentinel
    assert c10d.Backend.backend_capability["xccl"] == ["xpu"]
    print("LEFT_BUILTIN")
    """, NO_AUTOLOAD)
    assert "LEFT_BUILTIN" in out


@pytest.mark.timeout(TIMEOUT + 10)
def test_builtin_xccl_override_env():
    out = run_py(SIMULATE_BUILTIN + f"""
    import torch, torch.distributed as dist
    assert torch_xccl.is_routed()
    assert c10d.ProcessGroupXCCL is not sentinel
    dist.init_process_group("xccl", init_method="tcp://127.0.0.1:{free_port()}",
                            rank=0, world_size=1)
    assert torch_xccl.is_torch_xccl_backend()
    t = torch.ones(3); dist.all_reduce(t); assert t.tolist() == [1.0] * 3
    dist.destroy_process_group()
    print("OVERRIDDEN")
    """, {"TORCH_XCCL_OVERRIDE_BUILTIN": "1", **NO_AUTOLOAD})
    assert "OVERRIDDEN" in out
