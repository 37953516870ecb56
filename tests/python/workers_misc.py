"""Worker functions for the error, fault, DDP and ZeRO tests (run inside spawned ranks)."""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def expect_error(fn, *needles):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        missing = [n for n in needles if n not in msg]
        return None if not missing else f"message lacks {missing}: {msg[:300]}"
    return "no exception"


def bad_inputs(rank, world):
    problems = {}
    w = world

    def check(name, fn, *needles):
        err = expect_error(fn, *needles)
        if err:
            problems[name] = err

    # (complex tensors are viewed as real by torch itself; meta tensors never reach a backend)
    check("dtype", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)),
          "xccl allreduce", "unsupported dtype", "Short")
    check("mixed devices", lambda: dist.all_gather(
        [torch.zeros(2, device="meta") for _ in range(w)], torch.ones(2)),
        "xccl allgather", "same device", "cpu", "meta")
    check("mixed dtypes", lambda: dist.all_gather(
        [torch.zeros(2, dtype=torch.float64) for _ in range(w)], torch.ones(2)),
        "dtype")  # torch checks this one before the backend
    check("size", lambda: dist.all_gather([torch.zeros(3) for _ in range(w)], torch.ones(2)),
          "xccl allgather", "elements")
    check("list length", lambda: dist.all_gather([torch.zeros(2)], torch.ones(2)),
          "xccl allgather")
    check("into_tensor size", lambda: dist.all_gather_into_tensor(torch.zeros(2 * w + 1),
                                                                  torch.ones(2)),
          "xccl _allgather_base", "world_size")
    def bad_root():
        opts = dist.BroadcastOptions()
        opts.rootRank = w + 3
        dist.group.WORLD.broadcast([torch.ones(2)], opts).wait()

    check("bad root", bad_root,
          "xccl broadcast", "invalid root rank")
    check("split sizes", lambda: dist.all_to_all_single(
        torch.zeros(4 * w), torch.zeros(4 * w), [1] * w, [3] * w),
        "xccl alltoall_base", "split sizes sum to")
    check("split count", lambda: dist.all_to_all_single(
        torch.zeros(4 * w), torch.zeros(4 * w), None, [1] * (w + 1)),
        "xccl alltoall_base", "one entry per rank")
    check("premul int", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32),
                                                op=dist._make_nccl_premul_sum(2.0)),
          "xccl allreduce", "PREMUL_SUM")
    check("band float", lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND),
          "xccl allreduce", "bitwise")
    check("avg bool", lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool),
                                              op=dist.ReduceOp.AVG), "xccl allreduce", "AVG")
    check("send self", lambda: dist.group.WORLD.send([torch.ones(2)], rank, 0).wait(),
          "xccl send", "self")
    check("sparse", lambda: dist.all_reduce(torch.ones(2).to_sparse()))
    # argument errors do not poison the group
    t = torch.ones(3)
    dist.all_reduce(t)
    if not torch.equal(t, torch.full((3,), float(world))):
        problems["after errors"] = str(t)
    return problems


def dead_peer(rank, world, victim):
    """`victim` dies while the others are inside an allreduce; they must raise in time."""
    t = torch.ones(1 << 16)
    dist.all_reduce(t)  # everyone connected and healthy
    if rank == victim:
        time.sleep(0.5)
        os._exit(3)
    start = time.monotonic()
    try:
        for _ in range(50):
            dist.all_reduce(t)
        return {"raised": False, "elapsed": time.monotonic() - start}
    except Exception as e:  # noqa: BLE001
        # every later op must fail at once too (the group is dead, nothing hangs)
        later = expect_error(lambda: dist.all_reduce(torch.ones(1)))
        return {"raised": True, "elapsed": time.monotonic() - start, "msg": str(e)[:500],
                "type": type(e).__name__, "later_ok": later is None}


# ---------------------------------------------------------------- DDP / ZeRO

def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batches(rank, steps=6):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g))
            for _ in range(steps)]


def _train(model, group, rank, hook=None, steps=6):
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, process_group=group)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    for x, y in _batches(rank, steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in model.parameters()], losses


def ddp_parity(rank, world):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    gloo = dist.new_group(backend="gloo")
    xccl = dist.group.WORLD
    out = {}
    ref, ref_losses = _train(_model(), gloo, rank)
    got, losses = _train(_model(), xccl, rank)
    out["plain"] = max((a - b).abs().max().item() for a, b in zip(ref, got))
    out["losses"] = losses

    # fp16 compression: compare with the same hook over gloo
    r16, _ = _train(_model(), gloo, rank, default_hooks.fp16_compress_hook)
    g16, _ = _train(_model(), xccl, rank, default_hooks.fp16_compress_hook)
    out["fp16"] = max((a - b).abs().max().item() for a, b in zip(r16, g16))
    out["fp16_vs_fp32"] = max((a - b).abs().max().item() for a, b in zip(ref, g16))

    # bf16: DDP.register_comm_hook refuses a hook *named* bf16_compress_hook unless CUDA+NCCL
    # or XPU is present (a CPU-build check unrelated to the backend), so register the stock
    # hook through a wrapper with another name. The hook body is torch's own.
    def bf16_hook(state, bucket):
        return default_hooks.bf16_compress_hook(state, bucket)

    gb, _ = _train(_model(), xccl, rank, bf16_hook)
    out["bf16_vs_fp32"] = max((a - b).abs().max().item() for a, b in zip(ref, gb))
    rb, _ = _train(_model(), gloo, rank, bf16_hook)
    out["bf16"] = max((a - b).abs().max().item() for a, b in zip(rb, gb))
    return out


def zero(rank, world):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    results = {}
    for name, group in (("gloo", dist.new_group(backend="gloo")), ("xccl", dist.group.WORLD)):
        model = _model()
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                      process_group=group, lr=0.01)
        for x, y in _batches(rank):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            for p in model.parameters():  # plain data parallel gradient average
                dist.all_reduce(p.grad, group=group)
                p.grad /= world
            opt.step()
        opt.consolidate_state_dict(to=0)
        results[name] = [p.detach().clone() for p in model.parameters()]
    diff = max((a - b).abs().max().item() for a, b in zip(results["gloo"], results["xccl"]))
    return {"diff": diff}


def wait_timeout(rank, world):
    """Rank 1 skips a collective: rank 0's wait(timeout) raises; with BLOCKING_WAIT=1 the
    communicator is aborted, so rank 1's next collective fails fast instead of hanging."""
    import datetime

    import torch_xccl

    out = {"describe": torch_xccl.describe()}
    if rank == 0:
        work = dist.all_reduce(torch.ones(4), async_op=True)
        start = time.monotonic()
        out["wait"] = expect_error(lambda: work.wait(datetime.timedelta(seconds=2)),
                                   "xccl allreduce", "timed out")
        out["elapsed"] = time.monotonic() - start
        out["later"] = expect_error(lambda: dist.all_reduce(torch.ones(1)), "xccl allreduce")
    else:
        time.sleep(3)
        start = time.monotonic()
        out["peer"] = expect_error(lambda: dist.all_reduce(torch.ones(7)))
        out["elapsed"] = time.monotonic() - start
    return out


def teardown(rank, world):
    """TORCH_XCCL_ASYNC_ERROR_HANDLING=1: a dead peer takes the survivors down (SIGABRT)."""
    dist.all_reduce(torch.ones(8))
    if rank == 1:
        os._exit(3)
    work = dist.all_reduce(torch.ones(1 << 16), async_op=True)
    time.sleep(60)  # the completion thread must terminate the process before this returns
    return {"survived": work.is_completed()}
