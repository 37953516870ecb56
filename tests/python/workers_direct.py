"""Rank bodies for test_direct.py: torch_xccl.direct.all_reduce, the call with no Work."""
import datetime
import time

import torch
import torch.distributed as dist

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]


def _value(rank, n, dtype):
    """Rank `rank`'s input: small values whose sums, products and averages are exact."""
    base = torch.arange(n) % 3 + 1
    if dtype == torch.bool:
        return (base + rank) % 2 == 0
    if dtype == torch.uint8:
        return (base + rank).to(dtype)
    return (base + rank - 1).to(dtype) * (1 if dtype in INTS else 0.5)


def _expected(world, n, dtype, op):
    vals = [_value(r, n, dtype) for r in range(world)]
    out = vals[0].clone()
    for v in vals[1:]:
        if op == R.SUM:
            out = (out | v) if dtype == torch.bool else out + v
        elif op == R.PRODUCT:
            out = (out & v) if dtype == torch.bool else out * v
        elif op == R.MIN:
            out = torch.minimum(out, v)
        elif op == R.MAX:
            out = torch.maximum(out, v)
        elif op == R.BAND:
            out = out & v
        elif op == R.BOR:
            out = out | v
        elif op == R.BXOR:
            out = out ^ v
        elif op == R.AVG:
            out = out + v
    if op == R.AVG:
        out = out / world
    return out.to(dtype)


def every_dtype_and_op(rank, world):
    """Every dtype with every op it takes, at three sizes, in plain and peer-memory tensors,
    on the default group and a subgroup; the call returns the tensor it reduced in place.
    Returns the cases that differ from the expected values (none)."""
    import torch_xccl
    from torch_xccl import direct

    sub_members = [0, world - 1]
    sub = dist.new_group(sub_members)
    wrong = []
    cases = [(d, op) for d in FLOATS for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG)]
    cases += [(d, op) for d in INTS for op in (R.SUM, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR)]
    cases += [(torch.bool, op) for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX)]
    for n in (1, 1000, 1 << 18):
        for dtype, op in cases:
            if n == 1 << 18 and dtype not in (torch.float32, torch.int32, torch.bfloat16):
                continue  # the large size for a few types: the rings and mapped, not the slots
            if op == R.PRODUCT and dtype in FLOATS and n > 1000:
                continue  # products of large worlds overflow the 16-bit types' range
            for reg in (False, True):
                if reg:
                    with torch_xccl.peer_memory(min_bytes=1):
                        t = _value(rank, n, dtype).clone()
                else:
                    t = _value(rank, n, dtype).clone()
                got = direct.all_reduce(t, op)
                want = _expected(world, n, dtype, op)
                if op == R.AVG:  # the division may round apart from torch's
                    tol = 1e-2 if t.element_size() == 2 else 1e-6
                    same = torch.allclose(t.double(), want.double(), rtol=tol, atol=0)
                else:
                    same = torch.equal(t, want)
                if got is not t or not same:
                    wrong.append(f"{dtype} {op} n={n} reg={reg}")
    # Complex tensors: reduced as their real and imaginary parts.
    c = torch.full((5,), complex(rank, 1), dtype=torch.complex64)
    direct.all_reduce(c)
    if not torch.equal(c, torch.full((5,), complex(sum(range(world)), world),
                                     dtype=torch.complex64)):
        wrong.append(f"complex: {c.tolist()}")
    # A subgroup (ranks 0 and world-1 only; the others are not members).
    if rank in sub_members:
        t = torch.full((7,), float(rank))
        direct.all_reduce(t, group=sub)
        if not torch.equal(t, torch.full((7,), float(sum(sub_members)))):
            wrong.append(f"subgroup: {t.tolist()}")
    return wrong


def in_order_with_the_groups_other_collectives(rank, world):
    """Direct calls between async dist.all_reduce calls still outstanding: each meets the
    same call on every rank, in issue order. Returns whether every result is right."""
    from torch_xccl import direct

    ok = True
    for it in range(20):
        big = torch.full((1 << 16,), float(rank + it))
        work = dist.all_reduce(big, async_op=True)
        small = torch.full((3,), float(rank * 10 + it))
        direct.all_reduce(small)
        work.wait()
        ok &= torch.equal(big, torch.full((1 << 16,), float(sum(range(world)) + world * it)))
        ok &= torch.equal(small, torch.full((3,), float(10 * sum(range(world)) + world * it)))
    return ok


def bad_input_is_refused_and_the_group_keeps_working(rank, world):
    """Each bad call raises its error on the calling rank (nothing is sent); a good call
    after each still gives the right sum. Returns {case: error type and text}."""
    from torch_xccl import direct

    got = {}

    def attempt(name, fn):
        try:
            fn()
            got[name] = "accepted"
        except Exception as e:  # noqa: BLE001 - the type and text are what the test checks
            got[name] = f"{type(e).__name__}: {e}"
        t = torch.ones(4)
        direct.all_reduce(t)
        if not torch.equal(t, torch.full((4,), float(world))):
            got[name] += f" | then a wrong sum {t.tolist()}"

    attempt("xdev", lambda: direct.all_reduce(torch.ones(4, device="xdev:0")))
    attempt("strided", lambda: direct.all_reduce(torch.ones(4, 4).t()))
    attempt("premul", lambda: direct.all_reduce(
        torch.ones(4), dist._make_nccl_premul_sum(2.0)))
    attempt("int16", lambda: direct.all_reduce(torch.ones(4, dtype=torch.int16)))
    attempt("complex_max", lambda: direct.all_reduce(torch.ones(4, dtype=torch.complex64), R.MAX))

    def in_block():  # with a device: the backend's block (without one torch only captures
        # dist.all_reduce calls in Python, and a direct call runs at once)
        with dist._coalescing_manager(device=torch.device("cpu")):
            direct.all_reduce(torch.ones(4))

    attempt("coalescing", in_block)
    gloo = dist.new_group(backend="gloo")
    attempt("gloo", lambda: direct.all_reduce(torch.ones(4), group=gloo))
    others = dist.new_group([r for r in range(world) if r != 0])
    if rank == 0:
        attempt("not_member", lambda: direct.all_reduce(torch.ones(4), group=others))
    else:
        t = torch.ones(2)
        direct.all_reduce(t, group=others)  # the members' own call on it works
        got["members"] = t.tolist()
        direct.all_reduce(torch.ones(4))  # matches rank 0's good call after its refusal
    return got


def nan_check_names_the_rank(rank, world):
    """TORCH_XCCL_NAN_CHECK=1: rank 1 feeds a NaN; every rank raises naming it."""
    from torch_xccl import direct

    t = torch.ones(8)
    if rank == 1:
        t[3] = float("nan")
    try:
        direct.all_reduce(t)
        return "ran"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def a_peer_that_never_calls_times_out(rank, world):
    """Rank 0 calls; rank 1 waits on the store until rank 0 is done. Rank 0 must fail within
    the group's timeout (3 s), not hang. Returns (error text, seconds) on rank 0."""
    from torch_xccl import direct

    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        t0 = time.monotonic()
        try:
            direct.all_reduce(torch.ones(4))
            out = ("ran", 0.0)
        except Exception as e:  # noqa: BLE001
            out = (f"{type(e).__name__}: {e}", time.monotonic() - t0)
        store.set("direct_done", "1")
        return out
    store.wait(["direct_done"], datetime.timedelta(seconds=60))
    return None


def the_default_group_again_after_destroy(rank, world, init_file):
    """destroy_process_group, then a new default group: the next call runs on the new one
    (the old handle answers that its group is gone), and a call between the two raises."""
    from torch_xccl import direct

    t = torch.ones(2)
    direct.all_reduce(t)
    first = t.tolist()
    dist.destroy_process_group()
    try:
        direct.all_reduce(torch.ones(2))
        between = "ran"
    except Exception as e:  # noqa: BLE001
        between = type(e).__name__
    dist.init_process_group("xccl", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    t = torch.full((2,), float(rank))
    direct.all_reduce(t)
    return {"first": first, "between": between, "second": t.tolist()}


def other_threads_run_while_a_call_waits(rank, world):
    """Rank 1 comes 0.5 s late; while rank 0's direct call waits for it, a Python thread of
    rank 0 keeps counting (the GIL is released for the call). Returns rank 0's count during
    the call, and the sum."""
    import threading

    from torch_xccl import direct

    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        store.wait(["direct_counting"], datetime.timedelta(seconds=60))
        time.sleep(0.5)
        t = torch.ones(3)
        direct.all_reduce(t)
        return {"sum": t.tolist()}
    count = [0]
    stop = threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1
            time.sleep(0.001)

    th = threading.Thread(target=counter)
    th.start()
    time.sleep(0.05)  # the thread is counting
    t = torch.ones(3)
    store.set("direct_counting", "1")
    before = count[0]
    direct.all_reduce(t)
    during = count[0] - before
    stop.set()
    th.join()
    return {"sum": t.tolist(), "counted_during_call": during}


def another_groups_call_inside_a_coalescing_block(rank, world):
    """Inside group A's coalescing block, a blocking all_reduce on group B: libxccl's group is
    per thread, so it would be recorded into A's block and return unreduced. It must raise
    instead; the block's own operation and later calls on B are right."""
    a = dist.new_group(list(range(world)))
    b = dist.new_group(list(range(world)))
    ta, tb = torch.ones(4), torch.ones(4)
    try:
        with dist._coalescing_manager(group=a, device=torch.device("cpu")):
            dist.all_reduce(ta, group=a)
            dist.all_reduce(tb, group=b)
        inside = f"returned {tb.tolist()}"
    except Exception as e:  # noqa: BLE001 - the text is what the test checks
        inside = f"{type(e).__name__}: {e}"
    t = torch.ones(4)
    dist.all_reduce(t, group=b)
    t2 = torch.ones(4)
    dist.all_reduce(t2, group=a)
    return {"inside": inside, "b_after": t.tolist(), "a_after": t2.tolist()}
