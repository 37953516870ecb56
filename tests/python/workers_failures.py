"""Workers for test_failed_outputs.py: a peer fails while the survivors' collectives are in
flight, and every way a survivor could read those collectives' outputs must raise.

The last rank is the victim. After a checked warm-up it fails in the chosen way (killed,
stopped, or its group aborted) while the survivors enqueue one operation of each kind (the
collectives, a receive from the victim, a coalesced pair, a barrier) and then look at the
outputs each its own way (sync call then .cpu(), work.wait() then .cpu(), the future's value,
an op on the output, device synchronize). A survivor records, per
observation, whether it raised, the exception's type and message, and any value it got: the
tests require every observation to raise, and none to hand back a value.
"""
from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist

# Ranks of these workers are fresh interpreters (harness.run_world):
# peers that die or leave, and the survivors' exits.
FRESH_INTERPRETER = True

# Large enough for the peer-read (single copy) path on xdev; odd for the chunked rings.
BIG = (1 << 18) + 3
SMALL = 17


def _victim(how):
    time.sleep(0.3)  # the survivors have enqueued by now, or are about to
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)  # the harness kills it at the end
    elif how == "leave":  # the peer tears its group down and goes on living
        dist.destroy_process_group()
        time.sleep(30)
    elif how == "exit":
        os._exit(0)
    time.sleep(60)


def _coalesced(dev, *tensors):
    """Two allreduces in one coalesced group; returns the group's Work."""
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        for t in tensors:
            dist.all_reduce(t)
    return cm


def _observe(name, fn, out):
    """Runs fn (which reads an output); records what happened under `name`."""
    try:
        value = fn()
        out[name] = {"raised": False, "value": value}
    except Exception as e:  # noqa: BLE001 - the type is the result
        out[name] = {"raised": True, "type": type(e).__name__,
                     "dist_error": isinstance(e, dist.DistBackendError),
                     "msg": str(e).splitlines()[0][:400] if str(e) else ""}


def in_flight(rank, world, how="kill", device="xdev", size=BIG, shm=True):
    """Survivors: one operation of each kind in flight when the victim fails, then each
    output observed a different way. Returns {observation: outcome}."""
    dev = torch.device(device, rank % 2) if device == "xdev" else torch.device("cpu")
    if device == "xdev":
        torch.xdev.set_device(rank % 2)
    victim = world - 1
    # A checked warm-up: the group works, and every rank has connected to every other.
    t = torch.full((size,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    assert t[0].item() == world * (world + 1) / 2 and t[-1].item() == t[0].item()
    if rank == victim:
        _victim(how)
        return None
    n = size
    ar = torch.full((n,), float(rank + 1), device=dev)
    bc = torch.full((n,), float(rank + 1), device=dev)
    ag_in = torch.full((n,), float(rank + 1), device=dev)
    ag_out = torch.zeros(n * world, device=dev)
    rs_in = torch.full((n * world,), float(rank + 1), device=dev)
    rs_out = torch.zeros(n, device=dev)
    a2a_in = torch.full((n * world,), float(rank + 1), device=dev)
    a2a_out = torch.zeros(n * world, device=dev)
    fu = torch.full((n,), float(rank + 1), device=dev)
    rv = torch.full((n,), float(rank + 1), device=dev)  # received from the victim
    c1 = torch.full((n,), float(rank + 1), device=dev)  # a coalesced pair
    c2 = torch.full((SMALL,), float(rank + 1), device=dev)
    op = torch.full((n,), float(rank + 1), device=dev)
    sy = torch.full((n,), float(rank + 1), device=dev)
    out = {}
    works = {}
    # Every call may raise at once if the failure is already known: that is an outcome too.
    calls = {
        "all_reduce_sync_then_cpu": lambda: dist.all_reduce(ar),
        "broadcast_wait_then_cpu": lambda: works.__setitem__(
            "bc", dist.broadcast(bc, src=victim, async_op=True)),
        "all_gather_sync_then_cpu": lambda: dist.all_gather_into_tensor(ag_out, ag_in),
        "reduce_scatter_wait_then_cpu": lambda: works.__setitem__(
            "rs", dist.reduce_scatter_tensor(rs_out, rs_in, async_op=True)),
        "all_to_all_sync_then_cpu": lambda: dist.all_to_all_single(a2a_out, a2a_in),
        "future_value": lambda: works.__setitem__(
            "fu", dist.all_reduce(fu, async_op=True)),
        "op_on_output": lambda: dist.all_reduce(op),
        "device_synchronize": lambda: dist.all_reduce(sy),
        "irecv_wait_then_cpu": lambda: works.__setitem__("rv", dist.irecv(rv, src=victim)),
        "coalesced_wait_then_cpu": lambda: works.__setitem__("co", _coalesced(dev, c1, c2)),
        "barrier": lambda: dist.barrier(),
    }
    issued = {}
    for name, call in calls.items():
        try:
            call()
            issued[name] = True
        except Exception as e:  # noqa: BLE001
            issued[name] = False
            out[name] = {"raised": True, "type": type(e).__name__, "at": "call",
                         "dist_error": isinstance(e, dist.DistBackendError),
                         "msg": str(e).splitlines()[0][:400] if str(e) else ""}
    observe = {
        "all_reduce_sync_then_cpu": lambda: ar.cpu()[0].item(),
        "broadcast_wait_then_cpu": lambda: (works["bc"].wait(), bc.cpu()[0].item())[1],
        "all_gather_sync_then_cpu": lambda: ag_out.cpu()[-1].item(),
        "reduce_scatter_wait_then_cpu": lambda: (works["rs"].wait(), rs_out.cpu()[0].item())[1],
        "all_to_all_sync_then_cpu": lambda: a2a_out.cpu()[-1].item(),
        "future_value": lambda: works["fu"].get_future().wait()[0].cpu()[0].item(),
        "op_on_output": lambda: (op * 2).sum().item(),
        "device_synchronize": lambda: (torch.accelerator.synchronize(dev.index)
                                       if device == "xdev" else None, sy[0].item())[1],
        "irecv_wait_then_cpu": lambda: (works["rv"].wait(), rv.cpu()[0].item())[1],
        "coalesced_wait_then_cpu": lambda: (works["co"].wait(), c1.cpu()[0].item(),
                                            c2.cpu()[0].item())[1:],
        # A barrier that returned is a claim that every rank reached it: it may not.
        "barrier": lambda: "returned",
    }
    for name, fn in observe.items():
        if issued.get(name):
            _observe(name, fn, out)
    # How a program recovers: drop the group, clear the device's errors, use the device.
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a failed group may complain on the way out
        pass
    if device == "xdev":
        torch.xdev.clear_errors(dev.index)
        x = torch.ones(4, device=dev)
        out["_after_recovery"] = (x * 3).sum().item()
    return out


def ddp_step_loses_a_peer(rank, world, how="kill"):
    """DDP on xdev: the victim dies during the step's backward. A survivor's step must raise
    before any parameter changes. Returns the survivors' parameter sums and what raised."""
    torch.xdev.set_device(rank % 2)
    dev = torch.device("xdev", rank % 2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 64)).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    victim = world - 1

    def step(k):
        torch.manual_seed(100 + 10 * k + rank)
        x = torch.randn(32, 64, device=dev)
        loss = ddp(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    for k in range(3):
        step(k)
    sums = [p.detach().cpu().sum().item() for p in model.parameters()]
    if rank == victim:
        _victim(how)
        return None
    before = [p.detach().cpu().clone() for p in model.parameters()]
    raised = None
    try:
        step(3)
        torch.accelerator.synchronize(dev.index)
    except Exception as e:  # noqa: BLE001
        raised = {"type": type(e).__name__, "dist_error": isinstance(e, dist.DistBackendError),
                  "msg": str(e).splitlines()[0][:300]}
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    torch.xdev.clear_errors(dev.index)
    after = [p.detach().cpu() for p in model.parameters()]
    changed = [bool((a != b).any()) for a, b in zip(before, after)]
    return {"raised": raised, "changed": changed, "sums_before": sums}
