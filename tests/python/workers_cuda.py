"""Rank bodies of test_cuda.py that only a CUDA machine runs: one rank over xccl against NCCL,
and bad CUDA input (the collective matrix on CUDA tensors is workers_collectives.matrix)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from workers_collectives import Checker, inp, op_obj, ops_for


def nccl_vs_xccl_one_rank(rank: int, world: int) -> dict:
    """One rank on cuda:0: the same calls over the default xccl group and an nccl group give
    the same results (NCCL refuses two ranks on one GPU, so one rank is where it can serve as
    the reference on a single-GPU machine)."""
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    nccl = dist.new_group(backend="nccl")
    c = Checker(rank)
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                  torch.uint8, torch.int32, torch.int64]:
        for op in [o for o in ops_for(dtype) if o not in (ReduceOp.BAND, ReduceOp.BOR,
                                                         ReduceOp.BXOR)]:
            def case(dtype=dtype, op=op):
                a = inp(rank, dtype, salt=3).to(dev)
                b = a.clone()
                dist.all_reduce(a, op=op_obj(op, 0.5))
                dist.all_reduce(b, op=op_obj(op, 0.5), group=nccl)
                c.eq(f"all_reduce[{dtype},{op}]", a.cpu(), b.cpu())

            c.run(f"all_reduce[{dtype},{op}]", case)

    def movement():
        x = inp(rank, torch.float32, n=64).to(dev)
        for name, fn in (
            ("broadcast", lambda t, g: dist.broadcast(t, 0, group=g) or t),
            ("all_gather_into_tensor", lambda t, g: _agit(t, g)),
            ("reduce_scatter_tensor", lambda t, g: _rst(t, g)),
            ("all_to_all_single", lambda t, g: _a2a(t, g)),
        ):
            c.eq(name, fn(x.clone(), None).cpu(), fn(x.clone(), nccl).cpu())

    c.run("movement", movement)
    return {"checks": c.n, "failures": c.failures}


def _agit(t, g):
    out = torch.empty(t.numel() * dist.get_world_size(g), dtype=t.dtype, device=t.device)
    dist.all_gather_into_tensor(out, t, group=g)
    return out


def _rst(t, g):
    out = torch.empty(t.numel() // dist.get_world_size(g), dtype=t.dtype, device=t.device)
    dist.reduce_scatter_tensor(out, t, group=g)
    return out


def _a2a(t, g):
    out = torch.empty_like(t)
    dist.all_to_all_single(out, t, group=g)
    return out


def cuda_bad_input(rank: int, world: int) -> dict:
    """Bad CUDA input raises an error naming the op, on every rank, and nothing hangs."""
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    out = {}

    def raises(fn, *words):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            return all(w in str(e) for w in words) or str(e)
        return "no error"

    import torch_xccl

    # On a torch built for CUDA, xdev exists only when asked for (TORCH_XCCL_ACCELERATOR=xdev,
    # docs/XDEV_TORCH.md): the refusal of a CUDA tensor on a group bound to xdev is checked there.
    if torch_xccl.xdev.registered():
        g = dist.new_group()
        dist.all_reduce(torch.ones(2, device=f"xdev:{rank % 2}"), group=g)  # g now runs on xdev
        out["cuda_on_xdev_group"] = raises(
            lambda: dist.all_reduce(torch.ones(2, device=dev), group=g), "all_reduce", "xdev")
    out["no_xdev_device"] = torch_xccl.xdev.registered() or not hasattr(torch, "xdev")
    out["unsupported_dtype"] = raises(
        lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16, device=dev)), "all_reduce")
    t = torch.ones(4, 3, device=dev).t()  # non-contiguous: reduced and copied back
    dist.all_reduce(t)
    out["non_contiguous"] = bool(torch.equal(t.cpu(), torch.full((3, 4), float(world))))
    if torch.cuda.device_count() >= 2:
        h = dist.new_group()
        dist.all_reduce(torch.ones(2, device="cuda:0"), group=h)
        out["other_gpu"] = raises(
            lambda: dist.all_reduce(torch.ones(2, device="cuda:1"), group=h), "all_reduce")
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)  # the default group still works after the refusals
    out["still_works"] = bool(torch.equal(t.cpu(), torch.full((2,), float(world))))
    return out
