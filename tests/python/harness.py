"""Multi-process harness for the plugin tests: real processes, hard timeouts, no leftovers.

run_world(fn, world_size, timeout=..., **kwargs) starts `world_size` fresh processes, each
calling fn(rank, world_size, **kwargs) after init_process_group("xccl") over a fresh TCP
store, and returns the list of per-rank return values (each must be picklable). A rank that
raises, exits, or exceeds the timeout fails the call; every child is killed on the way out.

The ranks fork from a server process that has imported torch once (multiprocessing's
forkserver, started with torch's device-backend autoload off, so torch_xccl itself is
imported by each rank, after the rank has taken the caller's environment as it is at the
call): spawned ranks each imported torch, a third of this suite's time on two cores. A
forked rank ends with os._exit, skipping atexit handlers and the interpreter's finalisation,
so a world whose test is about how a rank ends (allow_exit, or a worker module that sets
FRESH_INTERPRETER = True: the flight recorder's dumps at exit, exits and restarts, lost
peers) is spawned, each rank a fresh interpreter that ends as a user's process does.
"""
from __future__ import annotations

import datetime
import os
import queue
import sys
import time
import traceback

import torch.multiprocessing as mp

from bench.util import free_port  # the one helper (the tests import it from here)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _context(fresh: bool):
    """The multiprocessing context of the ranks: spawn when `fresh` (or XCCL_TEST_SPAWN=1),
    else forkserver with torch preloaded, its server started once per test process with
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 (torch_xccl is left to the ranks, which read their
    environment first)."""
    if fresh or os.environ.get("XCCL_TEST_SPAWN") == "1":
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    from multiprocessing import forkserver
    ctx.set_forkserver_preload(["torch", "torch.distributed"])
    before = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    try:
        forkserver.ensure_running()  # a no-op once it runs
    finally:
        if before is None:
            del os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"]
        else:
            os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = before
    return ctx


def _entry(fn, rank, world_size, port, results, init, pg_timeout_s, kwargs, device_id=None,
           env=None):
    try:
        if env is not None:  # the caller's environment now, not the server's at its start
            os.environ.clear()
            os.environ.update(env)
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        import torch_xccl  # noqa: F401  (routes "xccl")

        if init:
            extra = {}
            if device_id == "xdev":  # eager init, bound to this rank's device
                torch.xdev.set_device(rank % 2)
                extra["device_id"] = torch.device("xdev", rank % 2)
            elif device_id == "cuda":  # likewise; every rank on cuda:0 with one GPU
                index = rank % torch.cuda.device_count()
                torch.cuda.set_device(index)
                extra["device_id"] = torch.device("cuda", index)
            dist.init_process_group(
                "xccl",
                init_method=f"tcp://127.0.0.1:{port}",
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=pg_timeout_s),
                **extra,
            )
        out = fn(rank, world_size, **kwargs)
        results.put((rank, "ok", out))
        if init and dist.is_initialized():
            dist.destroy_process_group()
    except BaseException as e:  # report, then exit non-zero
        report = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
        print(f"[rank {rank}] {report}", file=sys.stderr, flush=True)
        results.put((rank, "error", report))
        results.close()
        results.join_thread()  # the report reaches the parent before the hard exit
        sys.stdout.flush()
        os._exit(1)


class WorldFailed(AssertionError):
    pass


def run_world(fn, world_size, timeout=120.0, init=True, pg_timeout_s=60.0,
              allow_exit=(), device_id=None, **kwargs):
    """Run fn on world_size ranks; returns [result of rank 0, ..., rank n-1].

    allow_exit: ranks that are expected to die (their missing result is None).
    device_id="xdev": init_process_group(device_id=xdev:(rank % 2)) (eager, bound group);
    device_id="cuda": likewise on cuda:(rank % the GPU count).
    """
    fresh = bool(allow_exit) or getattr(sys.modules.get(fn.__module__), "FRESH_INTERPRETER", False)
    ctx = _context(fresh)
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry,
                         args=(fn, r, world_size, port, results, init, pg_timeout_s, kwargs,
                               device_id, dict(os.environ)),
                         daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    got: dict[int, tuple[str, object]] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < world_size - len(allow_exit):
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorldFailed(f"timed out after {timeout}s; results from ranks {sorted(got)}")
            try:
                rank, status, payload = results.get(timeout=min(left, 1.0))
                got[rank] = (status, payload)
                if status == "error":
                    raise WorldFailed(f"rank {rank} failed:\n{payload}")
            except queue.Empty:
                dead = [r for r, p in enumerate(procs)
                        if p.exitcode not in (None, 0) and r not in got and r not in allow_exit]
                if dead:
                    time.sleep(0.5)  # its error report may still be in flight
                    while not results.empty():
                        rank, status, payload = results.get()
                        got[rank] = (status, payload)
                        if status == "error":
                            raise WorldFailed(f"rank {rank} failed:\n{payload}")
                    raise WorldFailed(f"rank(s) {dead} exited with "
                                      f"{[procs[r].exitcode for r in dead]} without a result")
        for r, p in enumerate(procs):
            # A rank allowed to die may be stopped or asleep: once the others have answered it
            # gets a moment, then the finally below kills it (it used to hold the test to the
            # deadline: 100 s of every stopped-peer test).
            wait = 2.0 if r in allow_exit else deadline - time.monotonic()
            p.join(timeout=max(1.0, wait))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    return [got.get(r, (None, None))[1] for r in range(world_size)]


def communicate_all(procs, timeout):
    """[(returncode, output)] of subprocesses started with stdout=PIPE (stderr merged); every
    one still running when the first timeout strikes is killed, so a hang fails the test."""
    out = []
    try:
        for p in procs:
            text, _ = p.communicate(timeout=timeout)
            out.append((p.returncode, text))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    return out
