"""The collective matrix, run inside every rank of one world (see test_collectives.py).

Each check computes the expected value from the inputs every rank can derive locally, and,
where Gloo supports the case, also runs the same call on a Gloo group of the same ranks.
Failures are collected (not raised) so one world reports the whole matrix at once.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]
GLOO_DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]
N = 37  # odd on purpose


def inp(rank: int, dtype, n: int = N, salt: int = 0) -> torch.Tensor:
    base = (torch.arange(n) * 7 + salt) % 4 + 1 + (rank % 3)  # values 1..6
    if dtype == torch.bool:
        return (base + rank) % 2 == 0
    return base.to(dtype)


def reduce_ref(op, tensors, dtype, factor=None):
    if dtype == torch.bool:
        st = torch.stack(tensors)
        if op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.BOR):
            return st.any(0)
        if op in (ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.BAND):
            return st.all(0)
        if op == ReduceOp.BXOR:
            return (st.to(torch.int64).sum(0) % 2).bool()
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    st = torch.stack([t.to(wide) for t in tensors])
    if op == ReduceOp.SUM:
        r = st.sum(0)
    elif op == ReduceOp.PRODUCT:
        r = st.prod(0)
    elif op == ReduceOp.MIN:
        r = st.min(0).values
    elif op == ReduceOp.MAX:
        r = st.max(0).values
    elif op == ReduceOp.AVG:
        r = st.mean(0)
    elif op == "premul":
        r = st.sum(0) * factor
    else:
        r = st[0].clone()
        for t in st[1:]:
            r = {ReduceOp.BAND: torch.bitwise_and, ReduceOp.BOR: torch.bitwise_or,
                 ReduceOp.BXOR: torch.bitwise_xor}[op](r, t)
    if not dtype.is_floating_point and op != ReduceOp.AVG:
        # integer arithmetic wraps like the library's (two's complement, mod 2^bits)
        if dtype == torch.uint8:
            return (r % 256).to(dtype)
        if dtype == torch.int8:
            return (((r + 128) % 256) - 128).to(dtype)
    return r.to(dtype)


def ops_for(dtype):
    if dtype == torch.bool:
        return [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.BAND,
                ReduceOp.BOR, ReduceOp.BXOR]
    ops = [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX]
    if dtype.is_floating_point:
        ops += [ReduceOp.AVG, "premul"]
    else:
        ops += [ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR]
    return ops


def op_obj(op, factor):
    if op == "premul":
        return dist._make_nccl_premul_sum(factor)
    return op


def tol(dtype):
    return {torch.float16: 2e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-6)


class Checker:
    def __init__(self, rank):
        self.rank = rank
        self.n = 0
        self.failures: list[str] = []

    def eq(self, name, got, want, dtype=None):
        self.n += 1
        dtype = dtype or want.dtype
        try:
            if got.dtype != want.dtype or got.shape != want.shape:
                raise AssertionError(f"dtype/shape {got.dtype}{tuple(got.shape)} != "
                                     f"{want.dtype}{tuple(want.shape)}")
            if dtype.is_floating_point:
                ok = torch.allclose(got.double(), want.double(), rtol=tol(dtype), atol=tol(dtype))
            else:
                ok = torch.equal(got, want)
            if not ok:
                raise AssertionError(f"got {got.flatten()[:8].tolist()} want "
                                     f"{want.flatten()[:8].tolist()}")
        except AssertionError as e:
            self.failures.append(f"rank {self.rank} {name}: {e}")

    def run(self, name, fn):
        try:
            fn()
        except Exception as e:  # a crash in one check is a failure, the matrix goes on
            self.n += 1
            self.failures.append(f"rank {self.rank} {name}: raised {type(e).__name__}: {e}")


def matrix(rank: int, world: int, device: str = "cpu") -> dict:
    """device "xdev": every tensor (inputs, outputs, references) is created on xdev:(rank % 2)
    through torch's default device, so ranks 0 and 2 share a device with 3 ranks. Results are
    read right after each call on the caller's stream: right only if wait() orders it."""
    c = Checker(rank)
    factor = 0.5
    if device == "xdev":
        torch.xdev.set_device(rank % 2)
        torch.set_default_device(f"xdev:{rank % 2}")
        gloo = None  # Gloo has no xdev
    elif device == "cuda":  # every rank on the first GPU when there is one
        index = rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        torch.set_default_device(f"cuda:{index}")
        gloo = None  # the expected values are computed; gloo's CUDA support is partial
    else:
        gloo = dist.new_group(backend="gloo")

    # ---- all_reduce: dtype x op, in-place, sync and async (+ future value), + gloo
    for dtype in ALL:
        for op in ops_for(dtype):
            name = f"all_reduce[{dtype},{op}]"

            def case(dtype=dtype, op=op, name=name):
                t = inp(rank, dtype)
                want = reduce_ref(op, [inp(r, dtype) for r in range(world)], dtype, factor)
                if rank % 2 == 0:
                    dist.all_reduce(t, op=op_obj(op, factor))
                else:
                    work = dist.all_reduce(t, op=op_obj(op, factor), async_op=True)
                    fut_val = work.get_future().wait()
                    c.eq(name + ".future", fut_val[0], want)
                    work.wait()
                    assert work.is_completed() and work.is_success()
                c.eq(name, t, want)
                if gloo and dtype in GLOO_DTYPES and op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN,
                                                   ReduceOp.MAX):
                    g = inp(rank, dtype)
                    dist.all_reduce(g, op=op, group=gloo)
                    c.eq(name + ".vs_gloo", t, g)

            c.run(name, case)

    # ---- non-contiguous input (copied back)
    def noncontig():
        base = torch.zeros(N, 3)
        view = base[:, 1]
        view.copy_(inp(rank, torch.float32))
        dist.all_reduce(view)
        want = reduce_ref(ReduceOp.SUM, [inp(r, torch.float32) for r in range(world)],
                          torch.float32)
        c.eq("all_reduce.noncontig", view.clone(), want)
        c.eq("all_reduce.noncontig.untouched", base[:, 0].clone(), torch.zeros(N))

    c.run("all_reduce.noncontig", noncontig)

    # ---- zero-sized and multi-dimensional
    def shapes():
        t = torch.empty(0)
        dist.all_reduce(t)
        c.eq("all_reduce.empty", t, torch.empty(0))
        t = inp(rank, torch.float64, 24).reshape(2, 3, 4)
        dist.all_reduce(t, op=ReduceOp.MAX)
        want = reduce_ref(ReduceOp.MAX, [inp(r, torch.float64, 24) for r in range(world)],
                          torch.float64).reshape(2, 3, 4)
        c.eq("all_reduce.3d", t, want)

    c.run("shapes", shapes)

    # ---- broadcast from every root, every dtype
    for dtype in ALL:
        for root in range(world):
            def case(dtype=dtype, root=root):
                t = inp(rank, dtype, salt=root)
                dist.broadcast(t, src=root)
                c.eq(f"broadcast[{dtype},root={root}]", t, inp(root, dtype, salt=root))
                if gloo and dtype in GLOO_DTYPES:
                    g = inp(rank, dtype, salt=root)
                    dist.broadcast(g, src=root, group=gloo)
                    c.eq(f"broadcast[{dtype},root={root}].vs_gloo", t, g)

            c.run(f"broadcast[{dtype},{root}]", case)

    # ---- reduce to every root
    for dtype in [torch.float32, torch.bfloat16, torch.int32, torch.uint8]:
        for i, op in enumerate(ops_for(dtype)):
            root = (i + ALL.index(dtype)) % world

            def case(dtype=dtype, op=op, root=root):
                t = inp(rank, dtype)
                dist.reduce(t, dst=root, op=op_obj(op, factor))
                if rank == root:
                    want = reduce_ref(op, [inp(r, dtype) for r in range(world)], dtype, factor)
                    c.eq(f"reduce[{dtype},{op},root={root}]", t, want)

            c.run(f"reduce[{dtype},{op}]", case)

    # ---- all_gather (list), all_gather_into_tensor, every dtype
    for dtype in ALL:
        def case(dtype=dtype):
            outs = [torch.zeros(N, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, inp(rank, dtype))
            for r in range(world):
                c.eq(f"all_gather[{dtype}][{r}]", outs[r], inp(r, dtype))
            flat = torch.zeros(world * N, dtype=dtype)
            dist.all_gather_into_tensor(flat, inp(rank, dtype))
            c.eq(f"all_gather_into_tensor[{dtype}]", flat,
                 torch.cat([inp(r, dtype) for r in range(world)]))
            if gloo and dtype in GLOO_DTYPES:
                g = [torch.zeros(N, dtype=dtype) for _ in range(world)]
                dist.all_gather(g, inp(rank, dtype), group=gloo)
                c.eq(f"all_gather[{dtype}].vs_gloo", torch.cat(outs), torch.cat(g))

        c.run(f"all_gather[{dtype}]", case)

    def ag_coalesced():
        ins = [inp(rank, torch.float32, 5), inp(rank, torch.float32, 3, salt=1)]
        outs = [[torch.zeros(5), torch.zeros(3)] for _ in range(world)]
        dist.all_gather_coalesced(outs, ins)
        for r in range(world):
            c.eq(f"all_gather_coalesced[{r}][0]", outs[r][0], inp(r, torch.float32, 5))
            c.eq(f"all_gather_coalesced[{r}][1]", outs[r][1], inp(r, torch.float32, 3, salt=1))

    c.run("all_gather_coalesced", ag_coalesced)

    # ---- all_gather / reduce_scatter lists whose tensors differ in size (rank 1's is empty):
    # xcclAllGatherv / xcclReduceScatterv
    sizes = [0 if r == 1 else 3 + 4 * r for r in range(world)]
    for dtype in [torch.float32, torch.int64, torch.bfloat16]:
        def uneven_ag(dtype=dtype):
            outs = [torch.zeros(n, dtype=dtype) for n in sizes]
            dist.all_gather(outs, inp(rank, dtype, sizes[rank]))
            for r in range(world):
                c.eq(f"all_gather.uneven[{dtype}][{r}]", outs[r], inp(r, dtype, sizes[r]))

        c.run(f"all_gather.uneven[{dtype}]", uneven_ag)
        for op in ops_for(dtype):
            def uneven_rs(dtype=dtype, op=op):
                ins = [inp(rank, dtype, sizes[d], salt=d) for d in range(world)]
                out = torch.zeros(sizes[rank], dtype=dtype)
                dist.reduce_scatter(out, ins, op=op_obj(op, factor))
                want = reduce_ref(op, [inp(r, dtype, sizes[rank], salt=rank)
                                       for r in range(world)], dtype, factor)
                c.eq(f"reduce_scatter.uneven[{dtype},{op}]", out, want)

            c.run(f"reduce_scatter.uneven[{dtype},{op}]", uneven_rs)

    # ---- reduce_scatter (list) and reduce_scatter_tensor, dtype x op
    for dtype in [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
                  torch.int8, torch.bool]:
        for op in ops_for(dtype):
            def case(dtype=dtype, op=op):
                full = [inp(r, dtype, N * world) for r in range(world)]
                want = reduce_ref(op, full, dtype, factor)[rank * N:(rank + 1) * N]
                out = torch.zeros(N, dtype=dtype)
                dist.reduce_scatter_tensor(out, inp(rank, dtype, N * world),
                                           op=op_obj(op, factor))
                c.eq(f"reduce_scatter_tensor[{dtype},{op}]", out, want)
                out2 = torch.zeros(N, dtype=dtype)
                dist.reduce_scatter(out2, list(inp(rank, dtype, N * world).chunk(world)),
                                    op=op_obj(op, factor))
                c.eq(f"reduce_scatter[{dtype},{op}]", out2, want)

            c.run(f"reduce_scatter[{dtype},{op}]", case)

    # ---- all_to_all_single: even and uneven splits; all_to_all lists
    for dtype in [torch.float32, torch.int64, torch.bfloat16, torch.bool]:
        def case(dtype=dtype):
            x = inp(rank, dtype, 4 * world)
            y = torch.empty_like(x)
            dist.all_to_all_single(y, x)
            want = torch.cat([inp(r, dtype, 4 * world)[rank * 4:(rank + 1) * 4]
                              for r in range(world)])
            c.eq(f"all_to_all_single.even[{dtype}]", y, want)
            # uneven: rank r sends (r + d + 1) rows to rank d; rows of 2 elements
            send_splits = [rank + d + 1 for d in range(world)]
            recv_splits = [s + rank + 1 for s in range(world)]
            xs = torch.cat([torch.full((n, 2), rank * 10 + d).to(dtype)
                            for d, n in enumerate(send_splits)])
            ys = torch.empty(sum(recv_splits), 2, dtype=dtype)
            dist.all_to_all_single(ys, xs, recv_splits, send_splits)
            want = torch.cat([torch.full((n, 2), s * 10 + rank).to(dtype)
                              for s, n in enumerate(recv_splits)])
            c.eq(f"all_to_all_single.uneven[{dtype}]", ys, want)
            if gloo and dtype in GLOO_DTYPES:
                yg = torch.empty_like(ys)
                dist.all_to_all_single(yg, xs, recv_splits, send_splits, group=gloo)
                c.eq(f"all_to_all_single.uneven[{dtype}].vs_gloo", ys, yg)
            ins = [torch.full((d + 1,), rank * 10 + d).to(dtype) for d in range(world)]
            outs = [torch.empty(rank + 1, dtype=dtype) for _ in range(world)]
            dist.all_to_all(outs, ins)
            for s in range(world):
                c.eq(f"all_to_all[{dtype}][{s}]", outs[s],
                     torch.full((rank + 1,), s * 10 + rank).to(dtype))

        c.run(f"all_to_all[{dtype}]", case)

    # ---- gather / scatter, every root
    for root in range(world):
        def case(root=root):
            t = inp(rank, torch.float64)
            outs = [torch.zeros(N, dtype=torch.float64) for _ in range(world)] if rank == root \
                else None
            dist.gather(t, outs, dst=root)
            if rank == root:
                for r in range(world):
                    c.eq(f"gather[root={root}][{r}]", outs[r], inp(r, torch.float64))
            out = torch.zeros(N, dtype=torch.int32)
            ins = [inp(r, torch.int32, salt=5) for r in range(world)] if rank == root else None
            dist.scatter(out, ins, src=root)
            c.eq(f"scatter[root={root}]", out, inp(rank, torch.int32, salt=5))

        c.run(f"gather_scatter[{root}]", case)

    # ---- point to point
    if world > 1:
        def p2p():
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            # ring with isend/irecv
            buf = torch.zeros(N)
            reqs = [dist.isend(inp(rank, torch.float32), nxt), dist.irecv(buf, prv)]
            for r in reqs:
                r.wait()
            c.eq("isend_irecv.ring", buf, inp(prv, torch.float32))
            # ... and one larger than the transports buffer (4 MiB against a 1 MiB SHM ring):
            # every rank's send waits for its peer's receive, queued behind the send. On cpu
            # the progress thread takes the irecv while the isend waits; on a device stream
            # they are ordered, as NCCL's are (there, batch_isend_irecv: docs/PLUGIN.md).
            if device == "cpu":
                big_out = torch.arange(1 << 20, dtype=torch.float32) + rank
                big = torch.zeros(1 << 20)
                for r in [dist.isend(big_out, nxt), dist.irecv(big, prv)]:
                    r.wait()
                c.eq("isend_irecv.ring_4MiB", big,
                     torch.arange(1 << 20, dtype=torch.float32) + prv)
            # batch_isend_irecv (coalesced)
            for dtype in [torch.float16, torch.int64]:
                recv_buf = torch.zeros(N, dtype=dtype)
                ops = [dist.P2POp(dist.isend, inp(rank, dtype, salt=3), nxt),
                       dist.P2POp(dist.irecv, recv_buf, prv)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                c.eq(f"batch_isend_irecv[{dtype}]", recv_buf, inp(prv, dtype, salt=3))
            # blocking send/recv pairs, then recv from any source on rank 0
            if rank == 0:
                got = set()
                for _ in range(world - 1):
                    t = torch.zeros(N)
                    src = dist.recv(t)  # any source
                    got.add(src)
                    c.eq(f"recv_any[{src}]", t, inp(src, torch.float32, salt=9))
                c.n += 1
                if got != set(range(1, world)):
                    c.failures.append(f"recv_any sources {got}")
            else:
                dist.send(inp(rank, torch.float32, salt=9), 0)

        c.run("p2p", p2p)

    # ---- coalescing manager (allreduce_coalesced), barriers, object collectives
    def misc():
        ts = [inp(rank, torch.float32, 4), inp(rank, torch.float32, 6, salt=2)]
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        c.eq("coalescing_manager[0]", ts[0], reduce_ref(
            ReduceOp.SUM, [inp(r, torch.float32, 4) for r in range(world)], torch.float32))
        c.eq("coalescing_manager[1]", ts[1], reduce_ref(
            ReduceOp.SUM, [inp(r, torch.float32, 6, salt=2) for r in range(world)],
            torch.float32))
        dist.barrier()
        # dist.monitored_barrier() is gated to Gloo in Python; the backend method is ours
        import datetime
        dist.group.WORLD.monitored_barrier(datetime.timedelta(seconds=30), True)
        objs = [None] * world
        dist.all_gather_object(objs, {"rank": rank})
        c.n += 1
        if objs != [{"rank": r} for r in range(world)]:
            c.failures.append(f"all_gather_object {objs}")
        lst = [rank, "x"] if rank == 0 else [None, None]
        dist.broadcast_object_list(lst, src=0)
        c.n += 1
        if lst != [0, "x"]:
            c.failures.append(f"broadcast_object_list {lst}")

    c.run("misc", misc)

    # ---- subgroups: new_group over a subset, new_subgroups
    if world >= 2:
        def groups():
            members = list(range(0, world, 2))
            g = dist.new_group(members, backend="xccl")
            if rank in members:
                assert dist.get_backend(g) == "xccl", dist.get_backend(g)
                t = torch.full((3,), float(rank))
                dist.all_reduce(t, group=g)
                c.eq("new_group.subset", t, torch.full((3,), float(sum(members))))
            sub, subs = dist.new_subgroups(group_size=1 if world % 2 else 2)
            size = dist.get_world_size(sub)
            t = torch.ones(2)
            dist.all_reduce(t, group=sub)
            c.eq("new_subgroups", t, torch.full((2,), float(size)))
            # default group still healthy after subgroup traffic
            t = torch.ones(1)
            dist.all_reduce(t)
            c.eq("default_after_subgroups", t, torch.full((1,), float(world)))

        c.run("groups", groups)

    return {"checks": c.n, "failures": c.failures}


# ---------------------------------------------------------------- CUDA (test_cuda.py)
