"""The rank side of bench/fault_suite.py: one rank of a fault-suite job.

Started by the suite as `python bench/fault_suite_worker.py` with RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT and FAULT_SUITE_SPEC (the run's plan, JSON) in its environment. It
runs the plan's operations through torch.distributed over xccl, checks every result, and
reports on stdout, one line each, prefixed with EV: its pid, init, every operation before
it is issued ("op"), its verified completion ("ok") or a failed check ("wrong"), an exception
("raised": the operation, how long it had run, the error), and its exit. The suite reads
nothing else from it. The rank's own fault (absent, late, another dtype) is in the plan.
"""
from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import sys
import time

EV = "@@FS "  # prefix of an event line (everything else on the output is log)
UNBOUNDED_CAP = 1_000_000  # operations a fault run's survivors may issue (they must raise)


def emit(ev: str, **kw) -> None:
    kw["ev"] = ev
    kw["t"] = time.monotonic()  # CLOCK_MONOTONIC: one clock for every namespace
    sys.stdout.write(EV + json.dumps(kw) + "\n")
    sys.stdout.flush()


def _values(torch, member, count, salt, dtype, offset=0):
    """Member `member`'s input elements [offset, offset + count): 0, 1 or 2 from a hash of
    (element, member, salt), so no two members, operations or chunk positions look alike,
    and any sum of four stays exact in every dtype."""
    idx = torch.arange(offset, offset + count, dtype=torch.int64)
    x = idx * 2654435761 + (member + 1) * 97531 + salt * 7919
    return ((x >> 11) % 3).to(dtype)


def _reduce(torch, parts, op, dtype):
    acc = parts[0].to(torch.int32)
    for p in parts[1:]:
        p = p.to(torch.int32)
        acc = acc + p if op == "sum" else (torch.maximum(acc, p) if op == "max"
                                           else torch.minimum(acc, p))
    return acc.to(dtype)


def _check(torch, got, want, what):
    if got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want):
        return None
    if got.shape != want.shape:
        return f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    bad = (got.to(torch.float64) != want.to(torch.float64)).nonzero().flatten()
    i = int(bad[0]) if bad.numel() else -1
    return (f"{what}: {bad.numel()} of {got.numel()} elements wrong, first at {i}: "
            f"got {got[i].item()}, expected {want[i].item()}")


def run_op(torch, dist, op, rank, world, salt, dtype_name, wait_s, device="cpu"):
    """Issues one operation; returns None when its result is right, else what is wrong.
    wait_s: the explicit timeout of a send/recv pair's waits (longer than the group's).
    device: where the tensors live ("cpu", or an xdev device: the collective is then ordered
    on its stream, and the result is read back as a program would, with .cpu()). op["wait"]:
    how the program waits: the blocking call ("sync"), async_op + wait() ("async"), or the
    future's value ("future")."""
    import datetime

    dt = getattr(torch, dtype_name)
    kind, n, root = op["kind"], op["numel"], op["root"]
    style = op.get("wait", "sync")

    def val(member, count, offset=0):
        return _values(torch, member, count, salt, dt, offset)

    def mine(t):  # this rank's copy of an input, where its tensors live
        return t.to(device)

    def call(fn, *args, **kw):
        if style == "sync":
            return fn(*args, **kw)
        work = fn(*args, async_op=True, **kw)
        if style == "future":
            work.get_future().wait()
        else:
            work.wait()
        return None

    def _check_out(got, want, what):
        return _check(torch, got.cpu(), want, what)

    redop = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
             "min": dist.ReduceOp.MIN}[op["op"]]
    if kind == "allreduce":
        t = mine(val(rank, n))
        call(dist.all_reduce, t, op=redop)
        return _check_out(t, _reduce(torch, [val(m, n) for m in range(world)], op["op"], dt),
                          "all_reduce")
    if kind == "broadcast":
        t = mine(val(rank, n))
        call(dist.broadcast, t, src=root)
        return _check_out(t, val(root, n), "broadcast")
    if kind == "allgather":
        out = torch.empty(n * world, dtype=dt, device=device)
        call(getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor,
             out, mine(val(rank, n)))
        return _check_out(out, torch.cat([val(m, n) for m in range(world)]), "all_gather")
    if kind == "reduce_scatter":
        out = torch.empty(n, dtype=dt, device=device)
        call(getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor,
             out, mine(val(rank, n * world)), op=redop)
        want = _reduce(torch, [val(m, n, rank * n) for m in range(world)], op["op"], dt)
        return _check_out(out, want, "reduce_scatter")
    if kind == "alltoall":
        out = torch.empty(n * world, dtype=dt, device=device)
        call(dist.all_to_all_single, out, mine(val(rank, n * world)))
        return _check_out(out, torch.cat([val(m, n, rank * n) for m in range(world)]),
                          "all_to_all")
    if kind == "barrier":
        dist.barrier()
        return None
    if kind == "sendrecv":  # a ring: send to the next rank, receive from the previous one
        if world == 1:  # the lone survivor of a 2-rank shrink: a ring of one has no peer
            return None  # (torch and xccl refuse a send to oneself)
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        out = torch.empty(n, dtype=dt, device=device)
        if op.get("style") == "pair":  # isend + irecv, waited with an explicit timeout
            works = [dist.isend(mine(val(rank, n)), nxt), dist.irecv(out, prv)]
            for w in works:
                w.wait(datetime.timedelta(seconds=wait_s))
        else:
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine(val(rank, n)), nxt),
                                             dist.P2POp(dist.irecv, out, prv)]):
                w.wait()
        return _check_out(out, val(prv, n), "send/recv")
    raise ValueError(kind)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _leave(dist, code: int) -> None:
    """What a training script does on its way out: destroy the group, then exit."""
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001  (a failed group may refuse; exiting is the point)
        emit("destroy_error", msg=_first_line(e)[:300])
    emit("exit", code=code)
    sys.stdout.flush()
    os._exit(code)


def _die_with_parent() -> None:
    """SIGKILL when the suite dies, even by SIGKILL (a stopped rank would linger forever)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != int(os.environ.get("FAULT_SUITE_PARENT", os.getppid())):
        os._exit(5)  # the suite died before the line above


def _build_stamp(torch_xccl) -> dict:
    """When the loaded extension and libxccl were built (their files' mtimes): a sweep that
    spans a rebuild says so."""
    out = {}
    base = os.path.dirname(torch_xccl.__file__)
    for key, name in (("ext", torch_xccl._C.__file__),
                      ("lib", os.path.join(base, "lib", "libxccl.so.0"))):
        with contextlib.suppress(OSError, AttributeError):
            out[key] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(name)))
    return out


def worker_main() -> None:
    _die_with_parent()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the suite asks before a kill
    spec = json.loads(os.environ["FAULT_SUITE_SPEC"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    emit("pid", pid=os.getpid())
    try:
        import datetime

        import torch
        import torch.distributed as dist

        import torch_xccl  # routes "xccl"
    except Exception as e:  # noqa: BLE001  (e.g. the library being rebuilt under us)
        emit("import_error", msg=f"{type(e).__name__}: {e}"[:500])
        os._exit(4)
    torch.set_num_threads(1)
    emit("build", **_build_stamp(torch_xccl))
    device = "cpu"
    if spec.get("device", "cpu") == "xdev":  # rank r on xdev:(r % 2), as two ranks per "card"
        torch.xdev.set_device(rank % 2)
        device = f"xdev:{rank % 2}"
    f = spec["fault"]
    emit("init_start")
    t0 = time.monotonic()
    try:
        dist.init_process_group("xccl", timeout=datetime.timedelta(seconds=spec["pg_timeout"]))
    except Exception as e:  # noqa: BLE001
        emit("raised", i=-1, elapsed=time.monotonic() - t0, type=type(e).__name__,
             msg=_first_line(e)[:500], text=str(e)[:2000])
        _leave(dist, 3)
    emit("init_done")
    ops = spec["ops"]
    total = len(ops) if spec["bounded"] else UNBOUNDED_CAP
    shrunk = False  # "shrink": after the fault the survivors continue on a smaller group
    i = 0
    while i < total:
        op = ops[i % len(ops)]
        dtype = op["dtype"]
        if rank == f.get("rank") and i == f.get("op") and not shrunk:
            if f["kind"] == "absent":
                emit("absent", i=i)
                sys.stdin.readline()  # alive but absent until the suite wakes it
                emit("back", i=i)
            elif f["kind"] == "late_op":
                time.sleep(f["delay_s"])
            elif f["kind"] == "mismatch":
                dtype = f["dtype"]
        if shrunk:  # a root of the old group may be past the new one's end
            op = dict(op, root=op["root"] % world)
        emit("op", i=i, **({"s": 1} if shrunk else {}))
        if f["kind"] == "shrink" and not shrunk and rank == f.get("rank") and i == f.get("op"):
            time.sleep(3600)  # the victim waits here for its SIGKILL: the fault is at op i,
            # never later (a bounded run could otherwise end before the kill lands)
        t0 = time.monotonic()
        try:
            bad = run_op(torch, dist, op, rank, world, spec["salt"] + i, dtype,
                         1.5 * spec["pg_timeout"], device)
        except Exception as e:  # noqa: BLE001
            emit("raised", i=i, elapsed=time.monotonic() - t0, type=type(e).__name__,
                 msg=_first_line(e)[:500], text=str(e)[:2000])
            if f["kind"] != "shrink" or shrunk:
                _leave(dist, 3)
            t1 = time.monotonic()
            try:  # find the lost rank, shrink to the survivors, redo op i there
                lost = torch_xccl.survivors.lost_ranks(timeout=2.0)
                torch_xccl.survivors.shrink(exclude=lost)
            except Exception as e2:  # noqa: BLE001
                emit("shrink_failed", i=i, msg=_first_line(e2)[:500])
                _leave(dist, 3)
            rank, world, shrunk = dist.get_rank(), dist.get_world_size(), True
            # The survivors may stand at different operations (one completed op i, whose
            # data it had, while another failed it): all resume where the new rank 0 does.
            at = torch.tensor([i], dtype=torch.int64)
            dist.broadcast(at, src=0)
            failed_at, i = i, int(at.item())
            emit("shrunk", i=failed_at, resume=i, lost=lost, elapsed=time.monotonic() - t1,
                 rank=rank, world=world)
            continue
        if bad is not None and not (f["kind"] == "mismatch" and rank == f["rank"]
                                    and i == f["op"]):
            emit("wrong", i=i, detail=bad, **({"s": 1} if shrunk else {}))
        else:
            emit("ok", i=i, **({"s": 1} if shrunk else {}))
        i += 1
    emit("done")
    _leave(dist, 0)


if __name__ == "__main__":
    worker_main()
