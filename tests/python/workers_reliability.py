"""Worker functions for the reliability tests: ranks that disagree, the end-of-job exit
pattern, and random verified collectives (run inside spawned ranks)."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

# Ranks of these workers are fresh interpreters (harness.run_world):
# the end-of-job exit is what these test.
FRESH_INTERPRETER = True


def _call(case, rank, world, numel, device="cpu"):
    """Issue rank `rank`'s side of disagreement `case`; the last rank is the one that differs."""
    d = rank == world - 1
    t = torch.ones(numel, device=device)
    if case == "dtype":
        dist.all_reduce(torch.ones(numel, dtype=torch.int32, device=device) if d else t)
    elif case == "op":
        dist.all_reduce(t, op=dist.ReduceOp.MAX if d else dist.ReduceOp.SUM)
    elif case == "count":
        dist.all_reduce(torch.ones(numel + 1, device=device) if d else t)
    elif case == "broadcast_root":
        dist.broadcast(t, src=1 if d else 0)
    elif case == "reduce_root":
        dist.reduce(t, dst=1 if d else 0)
    elif case == "kind":
        if d:
            dist.broadcast(t, src=0)
        else:
            dist.all_reduce(t)
    elif case == "order":
        if d:
            dist.broadcast(t, src=0)
            dist.all_reduce(t)
        else:
            dist.all_reduce(t)
            dist.broadcast(t, src=0)
    else:
        raise ValueError(case)


def disagree(rank, world, case, numel, device="cpu"):
    if device == "xdev":
        torch.xdev.set_device(rank)
        device = f"xdev:{rank}"
    start = time.monotonic()
    try:
        _call(case, rank, world, numel, device)
        if device != "cpu":
            # Stream-ordered: the call returns before the mismatch is found (as with NCCL);
            # the group's next synchronising call on the device raises it.
            dist.barrier(device_ids=[rank])
        out = {"raised": False}
    except Exception as e:  # noqa: BLE001
        out = {"raised": True, "type": type(e).__name__, "msg": str(e)}
    out["elapsed"] = time.monotonic() - start
    return out


def skip_one(rank, world):
    """Rank 1 never issues the group's third collective: with TORCH_XCCL_DESYNC_DEBUG=1 the
    others' timeout names it as the rank that is behind."""
    import datetime

    t = torch.ones(8)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    if rank == 1:
        time.sleep(8)
        return {"skipped": True}
    work = dist.all_reduce(t, async_op=True)
    try:
        work.wait(datetime.timedelta(seconds=3))
        return {"raised": False}
    except Exception as e:  # noqa: BLE001
        return {"raised": True, "msg": str(e)}


def exit_after_barrier(rank, world, iters, numel):
    """Every training script's ending: collectives, barrier, destroy, exit at once."""
    t = torch.ones(numel)
    for _ in range(iters):
        dist.all_reduce(t)
    dist.barrier()
    ok = bool(torch.all(t == float(world) ** iters))
    dist.destroy_process_group()
    return {"ok": ok}


def drop_finished_while_asking_futures(rank, world, iters):
    """Async collectives whose Work and tensors Python drops at once (the completion queue holds
    the last reference, and the tensors' Python objects are kept by their C++ side), while the
    caller keeps asking for futures (getFuture() takes the queue's lock holding the GIL). The
    completion thread once released such Works under that lock and waited for the GIL there:
    both threads waited for ever (fault suite, seed 1, runs 13 and 77)."""
    import time

    import torch
    import torch.distributed as dist

    torch.xdev.set_device(rank % 2)
    dev = torch.device("xdev", rank % 2)
    t0 = time.monotonic()
    keep = None
    for i in range(iters):
        dist.all_reduce(torch.full((64,), float(i), device=dev), async_op=True)  # dropped
        w = dist.all_reduce(torch.ones(8, device=dev), async_op=True)
        w.get_future()
        if i % 16 == 0:
            keep = w.get_future().wait()[0]
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)
    return {"sum": t.cpu().tolist(), "last": keep.cpu().tolist(), "s": time.monotonic() - t0}
