"""The xdev device as torch sees it: naming, counting, selecting, bad indices, autoload."""
import os
import textwrap

import pytest
import torch

from xdev_util import ROOT, run_python


def test_privateuse1_is_named_xdev_and_module_registered():
    assert torch._C._get_privateuse1_backend_name() == "xdev"
    assert torch.get_device_module("xdev") is torch.xdev
    assert torch.xdev.is_available()
    assert torch.xdev.device_count() == int(os.environ.get("XCCL_XDEV_COUNT", "8"))


def test_example_from_the_issue_prints_the_right_thing():
    r = run_python("import torch, torch_xccl; x = torch.ones(3, device='xdev:1'); print(x * 2)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "tensor([2., 2., 2.], device='xdev:1')"


def test_device_count_follows_env():
    r = run_python("import torch, torch_xccl; print(torch.xdev.device_count())",
                   env_extra={"XCCL_XDEV_COUNT": "3"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "3"


def test_set_device_and_context():
    assert torch.xdev.current_device() == 0
    with torch.xdev.device(2):
        assert torch.xdev.current_device() == 2
        x = torch.empty(4, device="xdev")
        assert x.device == torch.device("xdev:2")
        with torch.xdev.device("xdev:5"):
            assert torch.xdev.current_device() == 5
        assert torch.xdev.current_device() == 2
    assert torch.xdev.current_device() == 0
    torch.xdev.set_device(3)
    try:
        assert torch.empty(1, device="xdev").device.index == 3
    finally:
        torch.xdev.set_device(0)


def test_device_of_and_tensor_helpers():
    x = torch.ones(2).xdev(4)
    assert x.is_xdev and x.device == torch.device("xdev", 4)
    with torch.xdev.device_of(x):
        assert torch.xdev.current_device() == 4
    m = torch.nn.Linear(2, 2).xdev()
    assert m.weight.device == torch.device("xdev:0")


def test_out_of_range_device_is_a_clear_error():
    with pytest.raises((IndexError, RuntimeError), match="xdev: invalid device index 99"):
        torch.ones(2, device="xdev:99")
    with pytest.raises((IndexError, RuntimeError), match="invalid device index"):
        torch.xdev.set_device(8)
    with pytest.raises((IndexError, RuntimeError)):
        torch.ones(2).to("xdev:8")
    # the process keeps working
    assert torch.ones(2, device="xdev:7").sum().item() == 2


def test_negative_device_is_a_clear_error():
    with pytest.raises(RuntimeError, match="negative"):
        torch.device("xdev", -2)
    with pytest.raises(ValueError, match="negative"):
        torch.xdev.set_device(-3)


def _fake_install(tmp_path, with_package=True):
    """A dist-info with the entry point, as `pip install` would write it."""
    dist = tmp_path / "torch_xccl-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_xccl\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[torch.backends]\nxdev = _torch_xccl_autoload:load\n")
    if not with_package:
        # An installed package whose extension is missing (shadows any other install).
        (tmp_path / "_torch_xccl_autoload.py").write_text(
            open(os.path.join(ROOT, "_torch_xccl_autoload.py")).read())
        (tmp_path / "torch_xccl").mkdir()
        (tmp_path / "torch_xccl" / "__init__.py").write_text(
            "raise ImportError('simulated: torch_xccl._xdev_C is missing')\n")
        return [str(tmp_path)]
    return [str(tmp_path), ROOT]


CHECK = textwrap.dedent("""
    import sys, torch
    print(torch._C._get_privateuse1_backend_name(), 'torch_xccl' in sys.modules)
    if 'torch_xccl' in sys.modules:
        print(torch.ones(2, device='xdev:1').add(1).cpu().tolist(), torch.xdev.device_count())
""")


def test_autoload_registers_xdev_at_import_torch(tmp_path):
    r = run_python(CHECK, pythonpath=_fake_install(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["xdev True", "[2.0, 2.0] 8"]


def test_autoload_can_be_disabled(tmp_path):
    r = run_python(CHECK, pythonpath=_fake_install(tmp_path),
                   env_extra={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "privateuseone False"


def test_autoload_without_the_extension_warns_and_torch_works(tmp_path):
    r = run_python(CHECK + "\nprint(torch.ones(2).sum().item())",
                   pythonpath=_fake_install(tmp_path, with_package=False))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["privateuseone", "False", "2.0"]
    assert "could not be registered" in r.stderr


def test_autocast_on_xdev_disabled_works_and_enabled_says_it_cannot():
    import warnings

    x = torch.ones(2, 2, device="xdev:0")
    with torch.autocast("xdev", enabled=False):
        assert (x @ x).dtype == torch.float32
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("xdev", dtype=torch.float16):
            assert (x @ x).dtype == torch.float32  # nothing is cast on xdev
    assert any("xdev" in str(w.message) for w in caught), [str(w.message) for w in caught]
