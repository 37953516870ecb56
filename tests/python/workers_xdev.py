"""Rank bodies for the stream-ordered backend on xdev (test_xdev_stream_order.py,
test_xdev_training.py). Each rank drives xdev:(rank % 2) unless a test says otherwise."""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

N = 4096


def _dev(rank: int) -> torch.device:
    torch.xdev.set_device(rank % 2)
    return torch.device("xdev", rank % 2)


# ---------------------------------------------------------------- stream semantics

def wait_orders_current_stream(rank, world, delay_s=1.0):
    """Rank 1 joins late. On rank 0, wait() must return at once (the host is not blocked),
    the Work is not complete yet, and a read queued on the current stream after wait() sees
    the reduced value: right only if wait() made the current stream wait for the collective."""
    dev = _dev(rank)
    x = torch.full((N,), float(rank + 1), device=dev)
    if rank == 1:
        time.sleep(delay_s)
    work = dist.all_reduce(x, async_op=True)
    t0 = time.perf_counter()
    work.wait()
    waited = time.perf_counter() - t0
    done_after_wait = work.is_completed()
    value = x.cpu()  # queued on the current stream: after the collective only if ordered
    out = {"waited": waited, "done_after_wait": done_after_wait,
           "ok": bool((value == sum(range(1, world + 1))).all()), "first": value[0].item()}
    # the future is device-aware: its value read on the current stream is the result too
    y = torch.full((N,), 1.0, device=dev)
    if rank == 1:
        time.sleep(delay_s)
    fut = dist.all_reduce(y, async_op=True).get_future()
    got = fut.wait()[0].cpu()
    out["future_ok"] = bool((got == world).all())
    # a hook-like chain: then() runs after the collective with its streams ordered
    z = torch.full((N,), 2.0, device=dev)
    chained = dist.all_reduce(z, async_op=True).get_future().then(lambda f: f.value()[0] / 2)
    out["then_ok"] = bool((chained.wait().cpu() == world).all())
    return out


def allocator_waits_for_the_collective(rank, world, delay_s=1.0):
    """Rank 0 frees its input right after launching an all_gather and allocates a buffer of
    the same size on the same stream, which it overwrites. The collective only reads the
    input once rank 1 arrives (late): the gathered value is right only if the input's memory
    was recorded on the communication stream (so the allocator did not hand it out)."""
    dev = _dev(rank)
    out = torch.zeros(world * N, device=dev)
    if rank == 1:
        time.sleep(delay_s)
    inp = torch.full((N,), float(rank + 5), device=dev)
    ptr = inp.data_ptr()
    work = dist.all_gather_into_tensor(out, inp, async_op=True)
    del inp
    junk = torch.empty(N, device=dev)
    reused = junk.data_ptr() == ptr
    junk.fill_(-1.0)
    work.wait()
    got = out.cpu().view(world, N)
    want = torch.stack([torch.full((N,), float(r + 5)) for r in range(world)])
    return {"ok": bool(torch.equal(got, want)), "reused": reused,
            "row0": got[0, :3].tolist(), "junk": junk[:2].cpu().tolist()}


def blocking_wait(rank, world, delay_s=0.5):
    """TORCH_XCCL_BLOCKING_WAIT=1: wait() returns only when the collective is done."""
    dev = _dev(rank)
    x = torch.ones(N, device=dev)
    if rank == 1:
        time.sleep(delay_s)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    return {"done_after_wait": work.is_completed(), "ok": bool((x.cpu() == world).all())}


def device_errors(rank, world):
    """Clear errors: a tensor on another device than the group's bound one; cpu and xdev
    tensors mixed in one call; a second device for the same group in one process."""
    errs = {}
    dev = torch.device("xdev", rank % 2)
    other = torch.device("xdev", 1 - rank % 2)

    def grab(name, fn):
        try:
            fn()
            errs[name] = "no error"
        except Exception as e:  # noqa: BLE001 (the message is the point)
            errs[name] = str(e).splitlines()[0]

    grab("bound", lambda: dist.all_reduce(torch.ones(4, device=other)))
    grab("mixed", lambda: dist.all_gather_into_tensor(torch.zeros(4 * world, device=dev),
                                                      torch.ones(4)))
    g = dist.new_group(list(range(world)))  # not bound: lazily on the first device used
    dist.all_reduce(torch.ones(4, device=dev), group=g)
    grab("second_device", lambda: dist.all_reduce(torch.ones(4, device=other), group=g))
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)  # the group still works
    errs["after"] = t.cpu().tolist()
    return errs


def split_and_subgroups(rank, world):
    """dist.split_group (needs device_id at init), new_group, new_subgroups on xdev."""
    dev = _dev(rank)
    res = {}
    halves = [list(range(0, world, 2)), list(range(1, world, 2))]
    sub = dist.split_group(split_ranks=[h for h in halves if h])
    t = torch.full((3,), float(rank), device=dev)
    dist.all_reduce(t, group=sub)
    mine = [h for h in halves if rank in h][0]
    res["split"] = t.cpu().tolist() == [float(sum(mine))] * 3
    g = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        u = torch.ones(2, device=dev)
        dist.all_reduce(u, group=g)
        res["new_group"] = u.cpu().tolist() == [2.0, 2.0]
    s, _ = dist.new_subgroups(group_size=1)
    v = torch.ones(2, device=dev)
    dist.all_reduce(v, group=s)
    res["subgroups"] = v.cpu().tolist() == [1.0, 1.0]
    return res


def collective_failure(rank, world):
    """A collective that fails on the communication stream (rank 1 dies mid-job) surfaces
    as an exception on the survivor, not a hang."""
    dev = _dev(rank)
    x = torch.ones(N, device=dev)
    dist.all_reduce(x)
    if rank == 1:
        os._exit(0)
    err = None
    t0 = time.perf_counter()
    try:
        for _ in range(3):
            dist.all_reduce(x)
            x.cpu()
            time.sleep(0.2)
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return {"err": err, "s": time.perf_counter() - t0}
