"""Rank bodies for re-initialisation: destroy_process_group() then init_process_group("xccl")
again in the same processes, many times, with collectives checked in every cycle
(tests/python/test_restart.py, bench/reinit_soak.py).

torch hands every default group the same store prefix, and keeps the TCPStore server of a
port alive in its process across destroy_process_group, so each cycle meets the previous
cycle's keys in the store: the backend must never use them (docs/RELIABILITY.md, section 11).
"""
from __future__ import annotations

import datetime
import re
import time
import traceback

import torch
import torch.distributed as dist

# Ranks of these workers are fresh interpreters (harness.run_world):
# re-initialisation and exits are what these test.
FRESH_INTERPRETER = True


def _expect(cond, what):
    if not cond:
        raise AssertionError(what)


def _one_cycle(rank, world, cycle, device, init, timeout):
    kwargs = {}
    dev = torch.device("cpu")
    if device == "mixed":  # cpu, xdev (lazy), cpu, xdev (eager), ...
        device = "xdev" if cycle % 2 else "cpu"
    if device == "xdev":
        torch.xdev.set_device(rank % 2)
        dev = torch.device("xdev", rank % 2)
        if cycle % 4 in (1, 2):  # eager (a bound group) every other xdev cycle, else lazy
            kwargs["device_id"] = dev
    dist.init_process_group("xccl", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout), **init, **kwargs)
    import torch_xccl
    scope = re.search(r"store_scope='([^']*)'", torch_xccl.describe())
    _expect(scope is not None, f"describe() names no store scope: {torch_xccl.describe()}")

    # allreduce on the cycle's device and on cpu (the host communicator)
    t = torch.full((257,), float(rank + cycle), device=dev)
    dist.all_reduce(t)
    want = world * (world - 1) / 2 + world * cycle
    _expect(bool((t.cpu() == want).all()), f"cycle {cycle}: allreduce gave {t[:4].tolist()}, "
                                           f"want {want}")
    if device != "cpu":
        c = torch.full((5,), float(rank * 10 + cycle))
        dist.all_reduce(c, op=dist.ReduceOp.MAX)
        _expect(c.tolist() == [float((world - 1) * 10 + cycle)] * 5, f"cycle {cycle}: max {c}")

    root = cycle % world
    b = torch.full((33,), float(rank), device=dev)
    dist.broadcast(b, src=root)
    _expect(bool((b.cpu() == root).all()), f"cycle {cycle}: broadcast from {root} gave {b[:4]}")

    # A store-based barrier: with a stale "release" key from the previous cycle the other
    # ranks would pass it before rank 0 arrives. Rank 0 comes 0.1 s late.
    if rank == 0:
        time.sleep(0.1)
    t0 = time.monotonic()
    dist.group.WORLD.monitored_barrier(datetime.timedelta(seconds=timeout), True)
    waited = time.monotonic() - t0
    if rank != 0:
        _expect(waited >= 0.06, f"cycle {cycle}: rank {rank} passed the monitored barrier in "
                                f"{waited:.3f} s, before rank 0 came (a stale release?)")

    if world > 2 and cycle % 5 == 4:  # a subgroup of the re-made world
        sub = dist.new_group([0, 1])
        if rank in (0, 1):
            s = torch.full((9,), float(rank + 1), device=dev)
            dist.all_reduce(s, group=sub)
            _expect(bool((s.cpu() == 3).all()), f"cycle {cycle}: subgroup allreduce {s[:3]}")
    if device != "cpu":
        torch.xdev.synchronize()
    dist.destroy_process_group()
    return scope.group(1)


def reinit_cycles(rank, world, port, cycles, device="cpu", mode="tcp", timeout_s=30.0):
    """`cycles` rounds of init_process_group + checked collectives + destroy_process_group.

    device: "cpu", "xdev" or "mixed" (cpu and xdev cycles in turn). mode "tcp": init_method
    tcp://127.0.0.1:port every time (torch re-uses the port's store server in rank 0's
    process); "store": one TCPStore made once and passed every time.
    Returns {"ok": cycles completed, "scopes": each cycle's store scope, "error": text}."""
    import torch_xccl  # noqa: F401  (routes "xccl")

    store = None
    scopes = []
    try:
        for cycle in range(cycles):
            if mode == "store":
                if store is None:
                    store = dist.TCPStore("127.0.0.1", port, world, rank == 0,
                                          timeout=datetime.timedelta(seconds=timeout_s))
                init = {"store": store}
            else:
                init = {"init_method": f"tcp://127.0.0.1:{port}"}
            scopes.append(_one_cycle(rank, world, cycle, device, init, timeout_s))
    except Exception as e:  # the count so far and why it stopped
        return {"ok": len(scopes), "scopes": scopes,
                "error": f"cycle {len(scopes)}: {type(e).__name__}: {e}\n"
                         f"{traceback.format_exc()[-1500:]}"}
    return {"ok": len(scopes), "scopes": scopes, "error": None}
