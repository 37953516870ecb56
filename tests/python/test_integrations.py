"""torch_xccl.integrations: import-safe without the clients, and each example run with the
real client on xdev (one process here; two ranks of every client run in tests/clients)."""
import os
import subprocess
import sys
import textwrap

import pytest

from harness import REPO, free_port

EXAMPLES = os.path.join(REPO, "examples", "integrations")


def _installed(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _run(args, timeout=240, env_extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO
    env.update({"OMP_NUM_THREADS": "1", "MASTER_PORT": str(free_port()),
                "TOKENIZERS_PARALLELISM": "false"})
    env.update(env_extra or {})
    env.pop("TORCH_XCCL_ACCELERATOR", None)
    p = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd=REPO)
    assert p.returncode == 0, f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
    return p.stdout


@pytest.mark.timeout(120)
def test_integrations_import_without_any_client():
    code = textwrap.dedent("""
        import importlib.abc, sys
        BLOCKED = {"pytorch_lightning", "lightning", "deepspeed", "accelerate", "transformers"}

        class Absent(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        sys.meta_path.insert(0, Absent())
        import torch_xccl.integrations.lightning as L
        import torch_xccl.integrations.deepspeed as D
        import torch_xccl.integrations.accelerate as A
        assert L.REGISTERED == [], L.REGISTERED
        try:
            D.XdevAccelerator
        except ImportError as e:
            assert "deepspeed" in str(e)
        else:
            raise AssertionError("XdevAccelerator without DeepSpeed")
        assert callable(A.use_xdev) and callable(D.install)
        print("IMPORT-SAFE")
    """)
    assert "IMPORT-SAFE" in _run(["-c", code])


@pytest.mark.timeout(300)
@pytest.mark.skipif(not _installed("pytorch_lightning"), reason="pytorch-lightning not installed")
def test_lightning_example_trains_on_xdev():
    out = _run([os.path.join(EXAMPLES, "lightning_xdev.py")])
    assert "lightning rank 0/1: trained on ['xdev:0'] with XdevSingleDeviceStrategy" in out, out


@pytest.mark.timeout(300)
@pytest.mark.skipif(not _installed("deepspeed"), reason="deepspeed not installed")
def test_deepspeed_example_trains_on_xdev():
    out = _run([os.path.join(EXAMPLES, "deepspeed_xdev.py")])
    assert "deepspeed rank 0: accelerator xdev, engine on xdev:0, backend xccl" in out, out


@pytest.mark.timeout(300)
@pytest.mark.skipif(not _installed("accelerate"), reason="accelerate not installed")
def test_accelerate_example_runs_unchanged_through_the_module():
    out = _run(["-m", "torch_xccl.integrations.accelerate",
                os.path.join(EXAMPLES, "accelerate_xdev.py")])
    assert "accelerate rank 0/1: device xdev:0, matmuls in torch.bfloat16" in out, out


@pytest.mark.timeout(300)
@pytest.mark.skipif(not _installed("transformers"), reason="transformers not installed")
def test_transformers_example_trains_on_xdev():
    out = _run([os.path.join(EXAMPLES, "transformers_xdev.py")])
    assert ("transformers rank 0/1: device xdev:0, parameters on xdev:0, "
            "lm_head tied to wte: True") in out, out
