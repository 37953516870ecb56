"""Worker functions for the flight-recorder tests (run inside spawned ranks)."""
from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist

import torch_xccl

# Ranks of these workers are fresh interpreters (harness.run_world):
# the dumps are written and awaited at exit (atexit).
FRESH_INTERPRETER = True


def _store():
    return dist.distributed_c10d._get_default_store()


def _sync(key, rank, waiter):
    """Rank `waiter` waits until the other rank set `key` (the store, not xccl)."""
    store = _store()
    if rank == waiter:
        store.wait([key])
    else:
        store.set(key, "1")


def fields_and_states(rank, world):
    """A few collectives and a send/recv, then an in-progress receive with a collective
    queued behind it on the same communicator; returns the records at both moments."""
    x = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    dist.all_reduce(x)                                            # collective #1
    y = torch.zeros(3, dtype=torch.int64)
    dist.broadcast(y, src=0)                                      # #2
    outs = [torch.zeros(5, dtype=torch.float16) for _ in range(world)]
    dist.all_gather(outs, torch.ones(5, dtype=torch.float16))     # #3
    p = torch.ones(6)
    if rank == 0:
        dist.send(p, dst=1)                                       # p2p #1
    else:
        dist.recv(p, src=0)
    sub = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(2), group=sub)                     # group "1", #1
    dist.barrier()                                                # #4
    done = torch_xccl.flight_record()

    # Rank 1 posts a receive that rank 0 serves only later, and an allreduce behind it: the
    # receive has started, the allreduce is scheduled (its communicator runs in order).
    z = torch.zeros(7)
    a = torch.ones(4)
    if rank == 1:
        wr = dist.irecv(z, src=0)                                 # p2p #2
        wa = dist.all_reduce(a, async_op=True)                    # #5
        time.sleep(0.3)
        pending = torch_xccl.flight_record()
        _sync("fr/go", rank, waiter=0)
        wr.wait()
        wa.wait()
    else:
        _sync("fr/go", rank, waiter=0)
        dist.send(z, dst=1)
        dist.all_reduce(a)
        pending = None
    dist.barrier()                                                # #6
    after = torch_xccl.flight_record()
    return {"done": done, "pending": pending, "after": after, "pid": os.getpid()}


def skip_collective(rank, world):
    """Rank 1 never issues the group's third collective; the others time out (group timeout
    3 s). Returns what each saw."""
    t = torch.ones(8)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    if rank == 1:
        # Busy elsewhere: a peer's request makes it dump meanwhile. Until its dump is there
        # (at most 30 s; it is written aside and renamed into place whole): a fixed 8 s sleep
        # raced the peers' 3 s timeouts on a loaded machine.
        mine = os.path.join(os.environ["TORCH_XCCL_TRACE_DIR"], "rank_1.json")
        deadline = time.monotonic() + 30
        while not os.path.exists(mine) and time.monotonic() < deadline:
            time.sleep(0.1)
        return {"skipped": True}
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        return {"raised": False}
    except Exception as e:  # noqa: BLE001
        return {"raised": True, "type": type(e).__name__, "msg": str(e)[:400],
                "elapsed": time.monotonic() - start}


def sigusr1(rank, world, trace_dir):
    """Rank 1 sends SIGUSR1 to rank 0 while both run collectives; rank 0 keeps going until
    its dump appears (or 20 s pass)."""
    pids = [None] * world
    dist.all_gather_object(pids, os.getpid())
    path = os.path.join(trace_dir, "rank_0.json")
    if rank == 1:
        os.kill(pids[0], signal.SIGUSR1)
    deadline = time.monotonic() + 20
    iters = 0
    while True:
        flag = torch.zeros(1)
        if rank == 0:
            flag[0] = 1.0 if os.path.exists(path) else (2.0 if time.monotonic() > deadline else 0.0)
        dist.all_reduce(flag)
        iters += 1
        if flag.item() > 0:
            return {"found": flag.item() == 1.0, "iters": iters, "pid": os.getpid()}


def on_demand(rank, world, trace_dir, explicit_dir):
    """Collectives, a barrier, then dumps by default path and into a given directory."""
    for i in range(5):
        dist.all_reduce(torch.full((16,), float(i)))
    dist.all_gather_into_tensor(torch.zeros(4 * world), torch.ones(4))
    dist.barrier()
    default = torch_xccl.dump_flight_record()
    explicit = torch_xccl.dump_flight_record(explicit_dir)
    record = torch_xccl.flight_record()
    return {"default": default, "explicit": explicit, "record": record,
            "expected_default": os.path.join(trace_dir, f"rank_{rank}.json")}


def mismatch(rank, world, case):
    """Collective #2 differs: rank 1 issues a broadcast (kind) or a longer tensor (count)."""
    t = torch.ones(16)
    dist.all_reduce(t)
    try:
        if rank == 1 and case == "kind":
            dist.broadcast(t, src=0)
        elif rank == 1 and case == "count":
            dist.all_reduce(torch.ones(17))
        else:
            dist.all_reduce(t)
        return {"raised": False}
    except Exception as e:  # noqa: BLE001
        return {"raised": True, "msg": str(e)[:300]}


def dies(rank, world, victim):
    """`victim` exits after collective #1; the others fail in #2 and dump."""
    t = torch.ones(64)
    dist.all_reduce(t)
    if rank == victim:
        time.sleep(0.3)
        os._exit(3)
    try:
        dist.all_reduce(t)
        return {"raised": False}
    except Exception as e:  # noqa: BLE001
        return {"raised": True, "msg": str(e)[:300]}


def disabled(rank, world):
    """TORCH_XCCL_TRACE_BUFFER_SIZE=0: nothing is recorded."""
    dist.all_reduce(torch.ones(4))
    return torch_xccl.flight_record()


def small_buffer(rank, world):
    """A ring of 3 entries after 7 collectives keeps #5..#7."""
    for _ in range(7):
        dist.all_reduce(torch.ones(4))
    return torch_xccl.flight_record()


def on_xdev(rank, world):
    """cpu and xdev tensors of one group (host and device communicators) share one
    numbering; a device entry names its device and completes once its stream passed it."""
    torch.xdev.set_device(rank % 2)
    dev = torch.device("xdev", rank % 2)
    dist.all_reduce(torch.ones(4))                                # #1, host communicator
    dist.all_reduce(torch.ones(8, device=dev))                    # #2, device communicator
    dist.all_reduce(torch.ones(4))                                # #3, host communicator
    torch.xdev.synchronize()
    deadline = time.monotonic() + 10
    while True:  # device Works complete when the completion thread sees them (20 ms sweeps)
        rec = torch_xccl.flight_record()
        if all(e["state"] == "completed" for e in rec["entries"]) or time.monotonic() > deadline:
            return rec
        time.sleep(0.05)
