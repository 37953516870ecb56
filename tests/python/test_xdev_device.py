"""The xdev device as torch sees it: naming, counting, selecting, bad indices, autoload."""
import os
import textwrap

import pytest
import torch

from xdev_util import fake_install, run_python


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


def test_out_of_range_device_is_a_clear_runtime_error():
    # RuntimeError, as torch's devices raise for a bad ordinal (CUDA: "invalid device ordinal")
    for bad in (lambda: torch.ones(2, device="xdev:99"), lambda: torch.xdev.set_device(8),
                lambda: torch.ones(2).to("xdev:8"), lambda: torch.accelerator.set_device_index(8)):
        with pytest.raises(RuntimeError, match="xdev: invalid device index (99|8). The device "
                                               "index is out of range") as info:
            bad()
        assert not isinstance(info.value, IndexError)
    # the process keeps working
    assert torch.ones(2, device="xdev:7").sum().item() == 2


def test_negative_device_is_a_clear_error():
    with pytest.raises(RuntimeError, match="negative"):
        torch.device("xdev", -2)
    with pytest.raises(ValueError, match="negative"):
        torch.xdev.set_device(-3)


CHECK = textwrap.dedent("""
    import sys, torch
    print(torch._C._get_privateuse1_backend_name(), 'torch_xccl' in sys.modules)
    if 'torch_xccl' in sys.modules:
        print(torch.ones(2, device='xdev:1').add(1).cpu().tolist(), torch.xdev.device_count())
""")


def test_autoload_registers_xdev_at_import_torch(tmp_path):
    r = run_python(CHECK, pythonpath=fake_install(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["xdev True", "[2.0, 2.0] 8"]


def test_autoload_can_be_disabled(tmp_path):
    r = run_python(CHECK, pythonpath=fake_install(tmp_path),
                   env_extra={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "privateuseone False"


def test_autoload_without_the_extension_warns_and_torch_works(tmp_path):
    r = run_python(CHECK + "\nprint(torch.ones(2).sum().item())",
                   pythonpath=fake_install(tmp_path, with_package=False))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["privateuseone", "False", "2.0"]
    assert "could not be registered" in r.stderr


def test_cuda_shaped_device_queries():
    assert torch.xdev.get_device_name() == torch.xdev.get_device_name(0)
    assert "xdev" in torch.xdev.get_device_name("xdev:3")
    props = torch.xdev.get_device_properties(1)
    free, total = torch.xdev.mem_get_info(1)
    assert props.total_memory == total == 16 * 1024**3 and 0 < free <= total
    assert props.name == torch.xdev.get_device_name(1) and props.multi_processor_count >= 1
    assert torch.xdev.is_bf16_supported()
    with pytest.raises(RuntimeError, match="invalid device index"):
        torch.xdev.get_device_properties(8)


def test_device_capability_lists_what_xdev_can_hold():
    from torch.testing._internal.common_dtype import get_all_dtypes

    supported = torch.accelerator.get_device_capability("xdev:0")["supported_dtypes"]
    quantized = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}
    for dtype in get_all_dtypes(include_complex32=True, include_qint=True):
        if dtype in quantized:
            assert dtype not in supported
            with pytest.raises(NotImplementedError):
                torch.empty(2, dtype=dtype, device="xdev")
        else:
            assert dtype in supported
            x = torch.zeros(2, dtype=dtype, device="xdev")
            assert torch.equal(x.to(torch.float32).cpu(), torch.zeros(2))


def test_is_backend_available_says_xccl_after_the_import():
    import torch.distributed as dist

    assert dist.is_backend_available("xccl") and dist.is_xccl_available()
    assert dist.Backend.default_device_backend_map["xdev"] == "xccl"
