"""Mixed precision on xdev: torch.autocast("xdev", dtype=float16/bfloat16) with CUDA's op lists
(csrc/torch_xdev/XdevAutocast.cpp) and torch.amp.GradScaler("xdev")."""
import warnings

import pytest
import torch
from torch import nn

import xdev_util  # noqa: F401

LOW = [torch.float16, torch.bfloat16]


def _no_autocast_warning(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    bad = [str(w.message) for w in caught if "utocast" in str(w.message)]
    assert not bad, bad
    return out


@pytest.mark.parametrize("dtype", LOW)
def test_matmuls_run_in_the_autocast_dtype(dtype):
    x = torch.randn(4, 8, device="xdev")
    w = torch.randn(8, 8, device="xdev")
    lin = nn.Linear(8, 3).to("xdev")

    def body():
        with torch.autocast("xdev", dtype=dtype):
            return x @ w, torch.mm(x, w), lin(x), torch.bmm(x[None], w[None])

    outs = _no_autocast_warning(body)
    assert [o.dtype for o in outs] == [dtype] * 4
    # exactly the CPU kernel on the cast inputs (xdev runs the CPU kernels)
    ref = torch.nn.functional.linear(x.cpu().to(dtype), lin.weight.detach().cpu().to(dtype),
                                     lin.bias.detach().cpu().to(dtype))
    assert torch.equal(outs[2].cpu(), ref)


@pytest.mark.parametrize("dtype", LOW)
def test_sensitive_ops_run_in_float32_and_promote_widens(dtype):
    h = torch.randn(4, 8, device="xdev").to(dtype)
    f = torch.randn(4, 8, device="xdev")
    with torch.autocast("xdev", dtype=dtype):
        assert h.exp().dtype == torch.float32                     # fp32
        assert torch.log_softmax(h, dim=-1).dtype == torch.float32  # fp32_set_opt_dtype
        assert h.sum().dtype == torch.float32
        assert torch.nn.functional.layer_norm(h, (8,)).dtype == torch.float32
        assert torch.nn.functional.mse_loss(h, f).dtype == torch.float32
        assert torch.addcmul(f, h, h).dtype == torch.float32      # promote to the widest
        assert torch.norm(h).dtype == torch.float32               # fp32_append_dtype
        assert (h + h).dtype == dtype                              # not listed: as it comes


def test_disabled_autocast_and_outside_the_region_change_nothing():
    x = torch.randn(3, 3, device="xdev")
    with torch.autocast("xdev", dtype=torch.bfloat16, enabled=False):
        assert (x @ x).dtype == torch.float32
    with torch.autocast("xdev", dtype=torch.bfloat16):
        pass
    assert (x @ x).dtype == torch.float32
    assert torch.get_autocast_dtype("xdev") in LOW


def test_float32_is_not_an_autocast_dtype_and_torch_says_so():
    with pytest.warns(UserWarning, match="xdev Autocast only supports dtypes of torch.float16"):
        with torch.autocast("xdev", dtype=torch.float32):
            pass


def test_binary_cross_entropy_is_refused_inside_autocast_as_on_cuda():
    p = torch.rand(4, device="xdev")
    t = torch.rand(4, device="xdev")
    with torch.autocast("xdev", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="not safe to autocast"):
            torch.nn.functional.binary_cross_entropy(p, t)
        assert torch.nn.functional.binary_cross_entropy_with_logits(p, t).dtype == torch.float32


@pytest.mark.parametrize("dtype", LOW)
def test_training_step_under_autocast_keeps_float32_master_weights(dtype):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to("xdev")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.randn(6, 8, device="xdev"), torch.randn(6, 1, device="xdev")
    with torch.autocast("xdev", dtype=dtype):
        out = m(x)
        loss = nn.functional.mse_loss(out, y)
    assert out.dtype == dtype and loss.dtype == torch.float32
    loss.backward()
    assert all(p.grad.dtype == torch.float32 and p.grad.device.type == "xdev"
               for p in m.parameters())
    opt.step()


def test_grad_scaler_on_xdev_scales_unscales_and_skips_a_step_with_inf():
    torch.manual_seed(0)
    m = nn.Linear(4, 1).to("xdev")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("xdev", init_scale=1024.0, growth_interval=1)
    x = torch.randn(5, 4, device="xdev")
    with torch.autocast("xdev", dtype=torch.float16):
        loss = m(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    w0 = m.weight.detach().cpu().clone()
    g_scaled = m.weight.grad.detach().cpu().clone()
    scaler.unscale_(opt)
    assert torch.allclose(m.weight.grad.cpu(), g_scaled / 1024.0)
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(m.weight.detach().cpu(), w0)  # finite: stepped
    assert scaler.get_scale() == 2048.0                  # and grew (growth_interval=1)

    opt.zero_grad()
    with torch.autocast("xdev", dtype=torch.float16):
        loss = m(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    m.weight.grad[0, 0] = float("inf")
    w1 = m.weight.detach().cpu().clone()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(m.weight.detach().cpu(), w1)      # inf: skipped
    assert scaler.get_scale() == 1024.0                  # and backed off
