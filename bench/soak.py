"""Soak: random collectives over xccl, every result checked against a local reference.

    python bench/soak.py --ops 10000 --world-sizes 2 3 4 --max-bytes 64M     # the full soak
    python bench/soak.py --ops 500 --world-sizes 2 3 --max-bytes 4M          # CI's sample

Every rank draws the same sequence of operations from one seed: the collective (allreduce,
broadcast, reduce, allgather into a tensor or a list (in or out of place), reduce_scatter,
all_to_all with even or uneven splits, gather, scatter, barrier, a ring of send/recv), the
size (0 to --max-bytes, log-uniform), the dtype, the ReduceOp (those defined for the
dtype, PREMUL_SUM included), the root and the group (the world or a random subgroup of at
least two ranks). Inputs are small integers that depend on (operation, rank, element), so
every rank can compute every other rank's input, and the reference result, exactly; float
results are compared within the dtype's rounding, integer ones exactly. A rank that raises
is an error (there is no disagreement in this workload, so any error is a false one).

Prints one summary line, "<ops> ops on <n> ranks: <k> mismatches, <e> errors", per world
size and exits non-zero on any mismatch, error or timeout (each world has a hard timeout).
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import math
import os
import queue
import random
import sys
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool"]
KINDS = ["allreduce", "broadcast", "reduce", "allgather", "allgather_list", "reduce_scatter",
         "alltoall", "alltoall_uneven", "gather", "scatter", "barrier", "sendrecv"]


def draw(rng: random.Random, world: int, max_bytes: int, groups):
    """One operation's spec; every rank draws the same sequence."""
    kind = rng.choice(KINDS)
    dtype = rng.choice(DTYPES)
    itemsize = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2,
                "bfloat16": 2}.get(dtype, 1)
    if rng.random() < 0.05:
        nbytes = 0
    else:
        nbytes = int(math.exp(rng.uniform(0, math.log(max(2, max_bytes)))))
    members = rng.choice(groups)
    n = len(members)
    numel = max(0, nbytes // itemsize)
    if kind in ("allgather", "allgather_list", "gather"):
        numel //= n  # per-rank block
    spec = {"kind": kind, "dtype": dtype, "numel": numel, "members": members,
            "root": rng.randrange(n), "inplace": rng.random() < 0.5,
            "salt": rng.randrange(1 << 20)}
    floating = dtype in ("float32", "float64", "float16", "bfloat16")
    ops = ["sum", "prod", "min", "max"]
    if dtype != "bool":
        ops.append("avg")
    if floating:
        ops.append("premul_sum")
    elif dtype != "bool":
        ops += ["band", "bor", "bxor"]
    spec["op"] = rng.choice(ops)
    spec["factor"] = rng.choice([0.5, 2.0, 3.0])
    # uneven all_to_all: split[i][j] = elements member i sends to member j
    spec["splits"] = [[rng.randrange(0, 5 + numel // max(1, n * n)) for _ in range(n)]
                      for _ in range(n)]
    return spec


# ------------------------------------------------------------------ inside a rank

def _inputs(torch, spec, member, numel, dtype):
    """Member `member`'s input: small integers, exact in every dtype, never all equal."""
    idx = torch.arange(numel, dtype=torch.int64)
    op = spec["op"]
    if spec["dtype"] == "bool":
        v = (idx + member + spec["salt"]) % 2
    elif op == "prod":
        v = 1 + (idx * 3 + member + spec["salt"]) % 2  # 1 or 2: a product of 4 stays <= 16
    else:
        v = (idx * 7 + member * 5 + spec["salt"]) % 3  # 0..2: a sum of 4 stays <= 8
    return v.to(dtype)


def _reduce_ref(torch, stack, op, n, dtype, factor):
    """The reference reduction of stacked inputs (float64 math, rounded once to dtype)."""
    if dtype == torch.bool:
        return {"sum": stack.any(0), "max": stack.any(0), "prod": stack.all(0),
                "min": stack.all(0)}[op]
    if op in ("band", "bor", "bxor"):
        out = stack[0].clone()
        for t in stack[1:]:
            out = {"band": out & t, "bor": out | t, "bxor": out ^ t}[op]
        return out
    x = stack.to(torch.float64)
    if op == "sum":
        r = x.sum(0)
    elif op == "prod":
        r = x.prod(0)
    elif op == "min":
        r = x.min(0).values
    elif op == "max":
        r = x.max(0).values
    elif op == "premul_sum":
        r = (x * factor).sum(0)
    elif op == "avg":
        r = x.sum(0) / n
        if not dtype.is_floating_point:
            r = torch.trunc(r)
    else:
        raise ValueError(op)
    return r.to(dtype)


def _same(torch, got, want):
    if got.dtype.is_floating_point:
        tol = {torch.float16: 1e-2, torch.bfloat16: 2e-2}.get(got.dtype, 1e-6)
        return torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=tol, atol=tol)
    return torch.equal(got, want)


def _reduce_op(dist, spec):
    op = spec["op"]
    if op == "premul_sum":
        return dist._make_nccl_premul_sum(spec["factor"])
    return {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG, "band": dist.ReduceOp.BAND,
            "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}[op]


def run_op(torch, dist, spec, me, group, device):
    """Runs one op on member index `me`; returns None when right, else what was wrong."""
    dtype = getattr(torch, spec["dtype"])
    members, n, numel = spec["members"], len(spec["members"]), spec["numel"]
    root = spec["root"]
    groot = members[root]  # torch takes global ranks for src/dst
    kind = spec["kind"]

    def inp(m, count=numel):
        return _inputs(torch, spec, m, count, dtype).to(device)

    def ref_reduce(count=numel):
        stack = torch.stack([_inputs(torch, spec, m, count, dtype) for m in range(n)])
        return _reduce_ref(torch, stack, spec["op"], n, dtype, spec["factor"])

    def check(got, want, what):
        got = got.cpu()
        if spec.get("corrupt") and got.numel() > 0:  # --inject-fault: prove the checker bites
            got = got.clone()
            got.view(-1)[0] = ~got.view(-1)[0] if got.dtype == torch.bool else got.view(-1)[0] + 1
        if got.shape != want.shape or not _same(torch, got, want):
            bad = (got != want).nonzero()[:3].flatten().tolist() if got.shape == want.shape else []
            return f"{what}: wrong result (first bad indices {bad})"
        return None

    if kind == "allreduce":
        t = inp(me)
        dist.all_reduce(t, op=_reduce_op(dist, spec), group=group)
        return check(t, ref_reduce(), "allreduce")
    if kind == "broadcast":
        t = inp(me)
        dist.broadcast(t, src=groot, group=group)
        return check(t, _inputs(torch, spec, root, numel, dtype), "broadcast")
    if kind == "reduce":
        t = inp(me)
        dist.reduce(t, dst=groot, op=_reduce_op(dist, spec), group=group)
        return check(t, ref_reduce(), "reduce") if me == root else None
    if kind == "allgather":
        out = torch.empty(n * numel, dtype=dtype, device=device)
        if spec["inplace"]:
            src = out.narrow(0, me * numel, numel)
            src.copy_(inp(me))
        else:
            src = inp(me)
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(
            out, src, group=group)
        want = torch.cat([_inputs(torch, spec, m, numel, dtype) for m in range(n)])
        return check(out, want, "allgather")
    if kind == "allgather_list":
        outs = [torch.empty(numel, dtype=dtype, device=device) for _ in range(n)]
        dist.all_gather(outs, inp(me), group=group)
        return check(torch.cat(outs).cpu(),
                     torch.cat([_inputs(torch, spec, m, numel, dtype) for m in range(n)]),
                     "allgather list")
    if kind == "reduce_scatter":
        block = numel // n
        src = inp(me, block * n)
        out = torch.empty(block, dtype=dtype, device=device)
        # torch 2.13 names it reduce_scatter_single (and deprecates reduce_scatter_tensor)
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(
            out, src, op=_reduce_op(dist, spec), group=group)
        return check(out, ref_reduce(block * n).narrow(0, me * block, block), "reduce_scatter")
    if kind in ("alltoall", "alltoall_uneven"):
        if kind == "alltoall":
            block = numel // n
            sp = [[block] * n for _ in range(n)]
        else:
            sp = spec["splits"]
        send_counts = sp[me]
        recv_counts = [sp[j][me] for j in range(n)]
        src = inp(me, sum(send_counts))
        out = torch.empty(sum(recv_counts), dtype=dtype, device=device)
        dist.all_to_all_single(out, src, recv_counts, send_counts, group=group)
        pieces = []
        for j in range(n):
            full = _inputs(torch, spec, j, sum(sp[j]), dtype)
            pieces.append(full.narrow(0, sum(sp[j][:me]), sp[j][me]))
        return check(out, torch.cat(pieces), kind)
    if kind == "gather":
        src = inp(me)
        lst = [torch.empty(numel, dtype=dtype, device=device) for _ in range(n)] \
            if me == root else None
        dist.gather(src, gather_list=lst, dst=groot, group=group)
        if me != root:
            return None
        return check(torch.cat([t.cpu() for t in lst]),
                     torch.cat([_inputs(torch, spec, m, numel, dtype) for m in range(n)]),
                     "gather")
    if kind == "scatter":
        out = torch.empty(numel, dtype=dtype, device=device)
        full = _inputs(torch, spec, root, numel * n, dtype)
        lst = [full.narrow(0, j * numel, numel).to(device) for j in range(n)] \
            if me == root else None
        dist.scatter(out, scatter_list=lst, src=groot, group=group)
        return check(out, full.narrow(0, me * numel, numel), "scatter")
    if kind == "barrier":
        dist.barrier(group=group)
        return None
    if kind == "sendrecv":
        nxt, prv = members[(me + 1) % n], members[(me - 1) % n]
        src = inp(me)
        out = torch.empty(numel, dtype=dtype, device=device)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, src, nxt, group),
                                       dist.P2POp(dist.irecv, out, prv, group)])
        for r in reqs:
            r.wait()
        return check(out, _inputs(torch, spec, (me - 1) % n, numel, dtype), "sendrecv")
    raise ValueError(kind)


def rank_main(rank, world, port, args, results):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist

    import torch_xccl  # noqa: F401

    torch.set_num_threads(1)
    mismatches, errors, done = [], [], 0
    try:
        dist.init_process_group("xccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=120))
        # Every subgroup of at least two ranks, created in the same order everywhere.
        subsets = [list(c) for k in range(2, world + 1)
                   for c in itertools.combinations(range(world), k)]
        groups = {}
        for s in subsets:
            g = dist.new_group(s) if len(s) < world else dist.group.WORLD
            groups[tuple(s)] = g
        rng = random.Random(args.seed * 1000 + world)
        per_world = args.ops
        for i in range(per_world):
            spec = draw(rng, world, args.max_bytes, subsets)
            if rank not in spec["members"]:
                continue
            me = spec["members"].index(rank)
            spec["corrupt"] = args.inject_fault and i % 10 == 0
            try:
                bad = run_op(torch, dist, spec, me, groups[tuple(spec["members"])], args.device)
            except Exception as e:  # noqa: BLE001
                errors.append(f"op {i} {spec['kind']} {spec['dtype']} {spec['numel']} "
                              f"{spec['op']}: {type(e).__name__}: {str(e)[:300]}")
                break  # the group is failed: later ops would only repeat the error
            if rank == 0 and args.progress and (i + 1) % args.progress == 0:
                print(f"  {world} ranks: {i + 1}/{per_world} ops, {len(mismatches)} mismatches",
                      flush=True)
            if bad:
                mismatches.append(f"op {i} {spec['kind']} {spec['dtype']} n={spec['numel']} "
                                  f"{spec['op']} members={spec['members']}: {bad}")
            done += 1
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        errors.append(f"{type(e).__name__}: {str(e)[:300]}")
    results.put((rank, done, mismatches, errors))


def run_world(world, args) -> bool:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = util.free_port()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, args, results), daemon=True)
             for r in range(world)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    got = {}
    try:
        while len(got) < world:
            left = args.timeout - (time.monotonic() - t0)
            if left <= 0:
                print(f"{world} ranks: TIMEOUT after {args.timeout}s (results from {sorted(got)})")
                return False
            try:
                rank, done, mism, errs = results.get(timeout=min(left, 1.0))
                got[rank] = (done, mism, errs)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead and not results.qsize():
                    print(f"{world} ranks: rank(s) {dead} died")
                    return False
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    ops = sum(v[0] for v in got.values())
    mism = [m for v in got.values() for m in v[1]]
    errs = [e for v in got.values() for e in v[2]]
    print(f"{args.ops} ops on {world} ranks ({ops} rank-ops checked, "
          f"{time.monotonic() - t0:.1f} s): {len(mism)} mismatches, {len(errs)} errors")
    for line in (mism + errs)[:20]:
        print("   ", line)
    return not mism and not errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=10000, help="operations per world size")
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--max-bytes", type=util.parse_bytes, default=util.parse_bytes("64M"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="tensor device (cpu)")
    ap.add_argument("--progress", type=int, default=0, metavar="N",
                    help="rank 0 prints a line every N operations")
    ap.add_argument("--inject-fault", action="store_true",
                    help="corrupt every 10th result before checking (the checker must catch it)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per world size")
    args = ap.parse_args()
    ok = True
    for w in args.world_sizes:
        ok &= run_world(w, args)
    total = "0 mismatches, 0 errors" if ok else "FAILED"
    print(f"soak: {total}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
