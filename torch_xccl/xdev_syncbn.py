"""The five kernels SyncBatchNorm needs, for xdev.

``nn.SyncBatchNorm`` calls ``batch_norm_stats``, ``batch_norm_gather_stats_with_counts``,
``batch_norm_elemt``, ``batch_norm_backward_reduce`` and ``batch_norm_backward_elemt``, which
PyTorch implements for CUDA only (there is no CPU kernel for the boxed fallback to run). They
are written here in torch operations on the xdev tensors themselves, per channel (dim 1), with
the statistics in float32 (float64 inputs stay float64), as the CUDA kernels accumulate.
"""
from __future__ import annotations

import torch

_lib = None


def _acc(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _dims(t: torch.Tensor) -> list:
    return [d for d in range(t.dim()) if d != 1]


def _bshape(t: torch.Tensor) -> list:
    """[1, C, 1, ...]: a per-channel vector broadcast over t."""
    return [1, t.size(1)] + [1] * (t.dim() - 2)


def batch_norm_stats(input, eps):
    x = input.to(_acc(input))
    mean = x.mean(_dims(x))
    var = x.var(_dims(x), unbiased=False)
    return mean, torch.rsqrt(var + eps)


def batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var,
                                        momentum, eps, counts):
    # mean, invstd: [world, C] (each rank's); counts: [world] elements per channel
    c = counts.to(mean.dtype).view(-1, 1)
    total = c.sum()
    g_mean = (mean * c).sum(0) / total
    var_i = 1.0 / (invstd * invstd) - eps
    g_var = ((var_i + (mean - g_mean) ** 2) * c).sum(0) / total
    if running_mean is not None:
        running_mean.copy_(running_mean * (1 - momentum) + g_mean.to(running_mean.dtype) * momentum)
    if running_var is not None:
        unbiased = g_var * total / (total - 1)
        running_var.copy_(running_var * (1 - momentum) + unbiased.to(running_var.dtype) * momentum)
    return g_mean, torch.rsqrt(g_var + eps)


def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    s = _bshape(input)
    out = (input.to(mean.dtype) - mean.view(s)) * invstd.view(s)
    if weight is not None:
        out = out * weight.to(mean.dtype).view(s)
    if bias is not None:
        out = out + bias.to(mean.dtype).view(s)
    return out.to(input.dtype)


def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    s, dims = _bshape(input), _dims(input)
    dy = grad_out.to(mean.dtype)
    xmu = input.to(mean.dtype) - mean.view(s)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * xmu).sum(dims)
    grad_weight = sum_dy_xmu * invstd
    grad_bias = sum_dy.clone()
    if weight is not None:
        grad_weight = grad_weight.to(weight.dtype)
        grad_bias = grad_bias.to(weight.dtype)
    return sum_dy, sum_dy_xmu, grad_weight, grad_bias


def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    s = _bshape(input)
    total = count.to(mean.dtype).sum()
    mean_dy = (sum_dy / total).view(s)
    mean_dy_xmu = (sum_dy_xmu / total).view(s)
    inv = invstd.view(s)
    xmu = input.to(mean.dtype) - mean.view(s)
    g = (grad_out.to(mean.dtype) - mean_dy - xmu * inv * inv * mean_dy_xmu) * inv
    if weight is not None:
        g = g * weight.to(mean.dtype).view(s)
    return g.to(input.dtype)


def register() -> None:
    """Registers the kernels for PrivateUse1 (once)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    for fn in (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt,
               batch_norm_backward_reduce, batch_norm_backward_elemt):
        lib.impl(fn.__name__, fn, "PrivateUse1")
    _lib = lib
