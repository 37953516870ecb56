"""Worker functions for test_survivors.py: a rank is lost, the others shrink and go on."""
from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist

FRESH_INTERPRETER = True  # these worlds are about a rank that dies


def _dev(device, rank):
    if device == "xdev":
        torch.xdev.set_device(rank % 2)
        return torch.device("xdev", rank % 2)
    return torch.device("cpu")


def lose_and_shrink(rank, world, victim, device="cpu", how="kill", warm_on="device"):
    """Warm up, lose `victim` (SIGKILL, or a revoke by the victim), then the survivors find
    it, shrink, and run collectives on the new default group. Returns what they saw.
    warm_on="cpu": the warm-up runs on the host communicator only, so that the survivors'
    first device collective is where the group's device communicator gets made (lazily)."""
    import torch_xccl

    dev = _dev(device, rank)
    t = torch.full((1 << 14,), float(rank + 1), device=dev if warm_on == "device" else "cpu")
    dist.all_reduce(t)
    assert t[0].item() == world * (world + 1) / 2
    if rank == victim:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.3)  # the others are waiting in the collective below
        torch_xccl.survivors.revoke()
        # Alive while the others probe and shrink (they must not find it lost), and no result:
        # the harness counts the ranks that may exit as gone.
        time.sleep(5)
        os._exit(0)
    out = {"global_rank": rank}
    t0 = time.monotonic()
    try:
        t = torch.full((1 << 16,), 1.0, device=dev)
        dist.all_reduce(t)
        t.cpu()
        out["failed"] = None
    except Exception as e:  # noqa: BLE001 - the failure is the subject
        out["failed"] = (type(e).__name__, str(e).splitlines()[0][:300])
    if how == "kill":
        out["lost"] = torch_xccl.survivors.lost_ranks(timeout=2.0)
        group = torch_xccl.survivors.shrink()
    else:  # a revoking rank is alive: the caller names it
        out["lost"] = torch_xccl.survivors.lost_ranks(timeout=2.0)
        group = torch_xccl.survivors.shrink(exclude=[victim])
    out["seconds_to_shrunk"] = time.monotonic() - t0
    out["size"] = dist.get_world_size()
    out["rank"] = dist.get_rank()
    out["default_is_new"] = group == dist.group.WORLD
    x = torch.full((1000,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    out["allreduce"] = x[0].item()
    out["seconds_to_first_result"] = time.monotonic() - t0
    b = torch.full((4,), float(rank), device=dev)
    dist.broadcast(b, src=0)
    out["broadcast"] = b[0].item()
    gathered = torch.zeros(dist.get_world_size(), device=dev)
    dist.all_gather_into_tensor(gathered, torch.tensor([float(rank)], device=dev))
    out["all_gather"] = gathered.cpu().tolist()
    # A second fault tolerance step is possible: the shrunk group can shrink again.
    out["supports_shrinking"] = bool(
        group._get_backend(torch.device("cpu")).supports_shrinking)
    return out


def shrink_bad_input(rank, world):
    """shrink_group's documented errors, on a working xccl group."""
    errors = {}
    for name, args in {
        "empty": ([],),
        "out_of_range": ([world],),
        "duplicate": ([1, 1],),
        "everyone": (list(range(world)),),
        "self": ([rank],),
    }.items():
        try:
            dist.shrink_group(*args)
            errors[name] = None
        except Exception as e:  # noqa: BLE001
            errors[name] = type(e).__name__
    t = torch.ones(3)
    dist.all_reduce(t)  # the group is untouched
    errors["still_works"] = t[0].item() == world
    return errors


def block_that_raises(rank, world):
    """A batch whose second operation raises (tensors on two devices): torch never ends the
    coalescing block; the next collectives of this thread must still run, and be right."""
    dev = _dev("xdev", rank)
    peer = (rank + 1) % world
    raised = None
    try:
        dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(4, device=dev), peer),
                                dist.P2POp(dist.irecv, torch.zeros(4), peer)])
    except Exception as e:  # noqa: BLE001
        raised = type(e).__name__
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    u = torch.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(u)
    return {"raised": raised, "cpu": t.tolist(), "xdev": u.cpu().tolist()}
