"""Ops on xdev: explicit kernels and the CPU fallback (views, in-place, out=, lists, random
numbers, device mixing), autograd, and a CNN + BatchNorm + AdamW training run that must match
the CPU run."""
import copy

import pytest
import torch
import torch.nn as nn

import xdev_util  # noqa: F401

X = "xdev"


def same(xdev_result, cpu_result, **kw):
    if isinstance(xdev_result, (tuple, list)):
        assert len(xdev_result) == len(cpu_result)
        for a, b in zip(xdev_result, cpu_result):
            same(a, b, **kw)
        return
    assert xdev_result.device.type == X
    torch.testing.assert_close(xdev_result.cpu(), cpu_result, **kw)


@pytest.mark.parametrize("fn", [
    lambda a, b: a + b * 2,
    lambda a, b: torch.matmul(a, b.t()),
    lambda a, b: torch.where(a > 0, a, b).exp(),
    lambda a, b: (a.sin() ** 2).sum(dim=1),
    lambda a, b: torch.softmax(a, dim=-1),
    lambda a, b: a.max(dim=1),
    lambda a, b: torch.sort(b, dim=0),
    lambda a, b: torch.topk(a.flatten(), 3),
    lambda a, b: torch.cat([a, b], dim=0),
    lambda a, b: torch.stack([a, b]).mean(0),
    lambda a, b: a.split(2, dim=1),
    lambda a, b: torch.nonzero(a > 0),
    lambda a, b: a.clamp(-0.5, 0.5).cumsum(0),
    lambda a, b: a.to(torch.float64).to(torch.int32),
    lambda a, b: a[b > 0],
    lambda a, b: a[:, [0, 2]],
    lambda a, b: torch.nn.functional.max_pool2d(a.view(1, 1, 4, 4), 2),
])
def test_ops_match_cpu(fn):
    torch.manual_seed(0)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    same(fn(a.to(X), b.to(X)), fn(a, b))


def test_views_share_memory_with_their_base():
    base = torch.zeros(4, 6, device=X)
    v = base[1:3, ::2]  # as_strided view
    v.add_(1)
    u = base.unfold(1, 2, 2)  # a view op the fallback runs: must stay a view
    u[0, 0, 1] = 7
    t = base.t()
    t[5, 3] = 9
    d = base.diagonal()
    d.mul_(2)
    expect = torch.zeros(4, 6)
    expect[1:3, ::2] += 1
    expect[0, 1] = 7
    expect[3, 5] = 9
    expect.diagonal().mul_(2)
    assert torch.equal(base.cpu(), expect)
    assert u._base is base and u.data_ptr() == base.data_ptr()


def test_in_place_returns_self_and_bumps_version():
    x = torch.ones(3, device=X)
    v = x._version
    y = x.mul_(3)
    assert y is x and x._version > v
    x.clamp_(max=2).sub_(torch.tensor(1.0))  # a 0-dim CPU tensor mixes in, as on CUDA
    assert torch.equal(x.cpu(), torch.ones(3))


def test_out_variants_resize_and_write_the_given_tensor():
    a, b = torch.arange(6.0).view(2, 3), torch.ones(2, 3)
    out = torch.empty(0, device=X)
    r = torch.add(a.to(X), b.to(X), out=out)
    assert r is out and out.shape == (2, 3)
    assert torch.equal(out.cpu(), a + b)
    big = torch.empty(100, device=X)
    p = big.data_ptr()
    big.resize_(0)  # the documented way to reuse an out= tensor of another size
    torch.mul(a.to(X), 2, out=big)  # grows back in place: the storage is big enough
    assert big.data_ptr() == p
    assert big.shape == (2, 3) and big.data_ptr() == p
    vals, idx = torch.empty(0, device=X), torch.empty(0, dtype=torch.long, device=X)
    torch.max(a.to(X), dim=1, out=(vals, idx))
    assert torch.equal(vals.cpu(), torch.tensor([2.0, 5.0]))
    assert torch.equal(idx.cpu(), torch.tensor([2, 2]))


def test_resize_and_set():
    x = torch.arange(4.0, device=X)
    x.resize_(2, 3)
    assert x.shape == (2, 3)
    assert torch.equal(x.flatten()[:4].cpu(), torch.arange(4.0))
    y = torch.empty(0, device=X).set_(x.untyped_storage(), 0, (2, 2), (2, 1))
    assert torch.equal(y.cpu(), torch.arange(4.0).view(2, 2))
    y.set_()
    assert y.numel() == 0 and y.device.type == X


def test_tensor_lists_and_foreach():
    xs = [torch.full((3,), float(i), device=X) for i in range(4)]
    ys = torch._foreach_add(xs, 1.0)
    assert all(y.device.type == X for y in ys)
    assert [y.sum().item() for y in ys] == [3.0, 6.0, 9.0, 12.0]
    torch._foreach_mul_(xs, 2.0)
    assert [x.sum().item() for x in xs] == [0.0, 6.0, 12.0, 18.0]
    norms = torch._foreach_norm(xs)
    same(torch.stack(norms), torch.tensor([0.0, 2.0, 4.0, 6.0]) * 3 ** 0.5)


def test_index_put_with_cpu_indices_and_scatter():
    x = torch.zeros(5, device=X)
    x[torch.tensor([1, 3])] = torch.tensor([1.0, 2.0], device=X)
    x.index_put_((torch.tensor([0]),), torch.tensor([5.0], device=X), accumulate=True)
    assert x.cpu().tolist() == [5.0, 1.0, 0.0, 2.0, 0.0]
    s = torch.zeros(3, device=X).scatter_add_(0, torch.tensor([0, 0, 2], device=X),
                                              torch.ones(3, device=X))
    assert s.cpu().tolist() == [2.0, 0.0, 1.0]


def test_mixing_devices_is_torchs_usual_error():
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*"
                                           r"xdev:0 and cpu"):
        torch.ones(3, device=X) + torch.ones(3)
    with pytest.raises(RuntimeError, match=r"same device.*xdev:0 and xdev:1"):
        torch.ones(3, device="xdev:0") * torch.ones(3, device="xdev:1")
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.ones(2, 2, device=X), torch.ones(2, 2))


def test_factories_and_scalars():
    assert torch.arange(5, device=X).cpu().tolist() == [0, 1, 2, 3, 4]
    assert torch.linspace(0, 1, 3, device="xdev:2").device == torch.device("xdev:2")
    assert torch.eye(2, device=X).sum().item() == 2
    assert torch.full((2,), 3, device=X).cpu().tolist() == [3, 3]
    assert torch.zeros(2, 2, device=X).add(1).prod().item() == 1
    assert bool((torch.ones(2, device=X) > 0).all())
    assert torch.tensor([1.5, 2.5], device=X).tolist() == [1.5, 2.5]
    e = torch.empty(0, 3, device=X)
    assert (e + 1).shape == (0, 3)


def test_random_numbers_follow_the_xdev_generator():
    torch.xdev.manual_seed(123)
    a = torch.randn(5, device=X)
    torch.xdev.manual_seed(123)
    b = torch.randn(5, device=X)
    assert torch.equal(a.cpu(), b.cpu())
    c = torch.randn(5, device=X)
    assert not torch.equal(a.cpu(), c.cpu())
    torch.manual_seed(7)  # seeds every device too
    d = torch.rand(4, device=X)
    torch.manual_seed(7)
    assert torch.equal(d.cpu(), torch.rand(4, device=X).cpu())
    g = torch.Generator(device=X)
    g.manual_seed(5)
    e = torch.randn(3, device=X, generator=g)
    g.manual_seed(5)
    assert torch.equal(e.cpu(), torch.randn(3, device=X, generator=g).cpu())
    state = torch.xdev.get_rng_state()
    f = torch.rand(3, device=X)
    torch.xdev.set_rng_state(state)
    assert torch.equal(f.cpu(), torch.rand(3, device=X).cpu())
    with torch.xdev.device(1):  # per-device generators
        torch.xdev.manual_seed(1)
    torch.xdev.manual_seed(2)
    assert torch.xdev.default_generators[1].initial_seed() == 1
    assert torch.xdev.default_generators[0].initial_seed() == 2


def test_autograd_matches_cpu():
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(5, 4)
    wx = w.detach().to(X).requires_grad_()
    loss_cpu = torch.tanh(x @ w).pow(2).sum()
    loss_x = torch.tanh(x.to(X) @ wx).pow(2).sum()
    loss_cpu.backward()
    loss_x.backward()
    assert wx.grad.device.type == X
    torch.testing.assert_close(wx.grad.cpu(), w.grad)
    torch.testing.assert_close(loss_x.item(), loss_cpu.item())


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.0), nn.Linear(16, 4))

    def forward(self, x):
        return self.body(x)


def _train(model, device, data, steps=6):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses = []
    for step in range(steps):
        x, y = data[step % len(data)]
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def test_cnn_batchnorm_adamw_training_matches_cpu():
    torch.manual_seed(0)
    model = SmallCNN()
    data = [(torch.randn(8, 3, 8, 8), torch.randint(0, 4, (8,))) for _ in range(3)]
    cpu_losses, cpu_model = _train(copy.deepcopy(model), "cpu", data)
    xdev_losses, xdev_model = _train(copy.deepcopy(model), "xdev:1", data)
    assert xdev_losses[-1] < xdev_losses[0]  # it learns
    torch.testing.assert_close(xdev_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(xdev_model.state_dict().items(), cpu_model.state_dict().values()):
        assert p.device == torch.device("xdev:1"), name
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5)
    xdev_model.eval()  # running statistics are used and were updated in place
    cpu_model.eval()
    x = data[0][0]
    torch.testing.assert_close(xdev_model(x.to("xdev:1")).cpu(), cpu_model(x),
                               rtol=1e-4, atol=1e-5)


def test_channels_last_convolution_keeps_its_layout():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    out = conv.to(X)(x.to(X))
    same(out, conv.cpu()(x), rtol=1e-5, atol=1e-5)
    conv_t = nn.ConvTranspose2d(3, 2, 3, stride=2)
    xt = torch.randn(1, 3, 4, 4, requires_grad=True)
    ref = conv_t(xt)
    ref.sum().backward()
    conv_x = copy.deepcopy(conv_t).to(X)
    xx = xt.detach().to(X).requires_grad_()
    out = conv_x(xx)
    out.sum().backward()
    same(out.detach(), ref.detach(), rtol=1e-5, atol=1e-5)
    same(xx.grad, xt.grad, rtol=1e-5, atol=1e-5)
    same(conv_x.weight.grad, conv_t.weight.grad, rtol=1e-5, atol=1e-5)
    same(conv_x.bias.grad, conv_t.bias.grad, rtol=1e-5, atol=1e-5)


def test_conjugate_and_negative_views_copy_correctly():
    z = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    zx = z.to(X)
    assert torch.equal(zx.conj().cpu(), z.conj())  # used to recurse through the conj fallback
    assert torch.equal(zx.conj().imag.cpu(), z.conj().imag)  # a negative view
    assert torch.equal(torch.view_as_real(zx).cpu(), torch.view_as_real(z))
    c = torch.empty(2, dtype=torch.complex64, device=X)
    c.copy_(zx.conj())
    assert torch.equal(c.cpu(), z.conj())


def test_fallback_keeps_cpu_semantics_for_overlap_and_strided_outputs():
    x = torch.arange(6.0, device=X)
    with pytest.raises(RuntimeError, match="single memory location"):
        x[1:].add_(x[:-1])  # the kernel sees that both arguments share one storage
    b = torch.zeros(3, 2, device=X)
    torch.add(torch.ones(3, device=X), 1, out=b[:, 0])  # out= into a strided view
    assert b.cpu().tolist() == [[2.0, 0.0], [2.0, 0.0], [2.0, 0.0]]
    a = torch.ones(3, device=X, requires_grad=True)
    y = a.clone()
    y[0].mul_(5)  # in-place on a view: autograd rebases the base (CopySlices)
    y.sum().backward()
    assert a.grad.cpu().tolist() == [5.0, 1.0, 1.0]
    vals, inv, counts = torch.unique(torch.tensor([3, 1, 3, 2], device=X), return_inverse=True,
                                     return_counts=True)
    assert [vals.cpu().tolist(), inv.cpu().tolist(), counts.cpu().tolist()] == \
        [[1, 2, 3], [2, 0, 2, 1], [1, 1, 2]]


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_layers_match_cpu(cell):
    # torch uses its fused cells (_thnn_fused_*_cell) on accelerators; they have no CPU kernel
    torch.manual_seed(0)
    rnn = getattr(nn, cell)(3, 5, num_layers=2)
    x = torch.randn(4, 2, 3, requires_grad=True)
    out, _ = rnn(x)
    (out ** 2).sum().backward()
    rnn_x = copy.deepcopy(rnn).to(X)
    xx = x.detach().to(X).requires_grad_()
    out_x, _ = rnn_x(xx)
    (out_x ** 2).sum().backward()
    same(out_x.detach(), out.detach(), rtol=1e-5, atol=1e-6)
    same(xx.grad, x.grad, rtol=1e-5, atol=1e-6)
    for p, q in zip(rnn_x.parameters(), rnn.parameters()):
        same(p.grad, q.grad, rtol=1e-5, atol=1e-6)
