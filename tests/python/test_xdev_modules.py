"""Modules move to xdev in place, as they move to CUDA (issue 33, root cause A).

torch.nn.Module._apply asks torch._has_compatible_shallow_copy_type(param, moved) and, when
true, moves each parameter in place (param.data = moved). For PrivateUse1 torch leaves the
answer to the backend (csrc/torch_xdev/XdevOps.cpp); without it every Parameter was replaced:
tied weights came apart and an optimizer made before the move kept the old CPU tensors.
"""
import pytest
import torch
from torch import nn

import xdev_util  # noqa: F401


def test_cpu_and_xdev_tensors_are_shallow_copy_compatible():
    cpu, xdev = torch.randn(4, 4), torch.randn(4, 4, device="xdev")
    assert torch._has_compatible_shallow_copy_type(cpu, xdev)
    assert torch._has_compatible_shallow_copy_type(xdev, cpu)
    assert torch._has_compatible_shallow_copy_type(xdev, torch.ones(2, device="xdev:1"))
    assert torch._has_compatible_shallow_copy_type(nn.Parameter(cpu), xdev)
    # not every tensor: sparse and meta keep torch's answer
    assert not torch._has_compatible_shallow_copy_type(xdev, cpu.to_sparse())
    assert not torch._has_compatible_shallow_copy_type(xdev, torch.empty(2, device="meta"))


def test_set_data_moves_a_tensor_between_cpu_and_xdev():
    t = torch.randn(4, 4)
    src = torch.randn(4, 4, device="xdev")
    t.data = src  # raised "incompatible tensor type" before
    assert t.device == torch.device("xdev:0") and t.data_ptr() == src.data_ptr()
    assert torch.equal(t.cpu(), src.cpu())
    back = torch.randn(4, 4)
    t.data = back
    assert t.device.type == "cpu" and t.data_ptr() == back.data_ptr()


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight  # GPT-2's lm_head / wte


def test_tied_weights_stay_tied_after_to_xdev():
    m = Tied()
    param = m.a.weight
    m.to("xdev:0")
    assert m.a.weight is m.b.weight
    assert m.a.weight is param and param.device == torch.device("xdev:0")
    # and they train as one tensor
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(3, 4, device="xdev")
    (m.a(x).sum() + m.b(x).sum()).backward()
    opt.step()
    assert m.a.weight is m.b.weight
    m.to("cpu")
    assert m.a.weight is m.b.weight and m.a.weight.device.type == "cpu"


def test_optimizer_made_before_the_move_keeps_its_parameters():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    ids = [id(p) for p in m.parameters()]
    m.to("xdev")
    assert [id(p) for p in m.parameters()] == ids
    assert [id(p) for g in opt.param_groups for p in g["params"]] == ids
    x, y = torch.randn(5, 4, device="xdev"), torch.randn(5, 2, device="xdev")
    before = [p.detach().cpu().clone() for p in m.parameters()]
    nn.functional.mse_loss(m(x), y).backward()
    opt.step()  # steps the xdev tensors the module computes with
    after = [p.detach().cpu() for p in m.parameters()]
    assert all(not torch.equal(a, b) for a, b in zip(before, after))
    assert all(s["exp_avg"].device.type == "xdev" for s in opt.state.values())


def test_module_to_xdev_computes_what_it_computed_on_the_cpu():
    torch.manual_seed(1)
    ref = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.LayerNorm(6), nn.Linear(6, 3))
    dev = Tied()  # unrelated module, moved to xdev and back, must not disturb anything
    dev.to("xdev").to("cpu")
    m = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.LayerNorm(6), nn.Linear(6, 3))
    m.load_state_dict(ref.state_dict())
    m.to("xdev")
    x = torch.randn(7, 6)
    # the CPU kernels run on xdev memory; BLAS may block differently on other addresses
    assert torch.allclose(m(x.to("xdev")).cpu(), ref(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_to_xdev_with_a_dtype_still_moves_in_place(dtype):
    m = Tied()
    m.to("xdev", dtype=dtype)
    assert m.a.weight is m.b.weight and m.a.weight.dtype == dtype
