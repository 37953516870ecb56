"""Rank bodies for test_observability.py: TORCH_XCCL_ENABLE_TIMING (work._get_duration()),
TORCH_XCCL_NAN_CHECK and TORCH_XCCL_USE_COMM_NONBLOCKING."""
import datetime
import time

import torch
import torch.distributed as dist


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the message is what the test checks
        return str(e)
    return None


def durations(rank, world, device="cpu"):
    """A collective that waits 300 ms for rank 1, one queued right behind it, and a
    coalesced block: what _get_duration() says for each, in milliseconds."""
    dev = torch.device(device, rank % 2) if device != "cpu" else torch.device("cpu")
    a = torch.ones(1024, device=dev)
    b = torch.ones(1024, device=dev)
    dist.barrier()
    if rank == 1:
        time.sleep(0.3)
    w1 = dist.all_reduce(a, async_op=True)
    w2 = dist.all_reduce(b, async_op=True)
    w1.wait()
    w2.wait()
    if dev.type != "cpu":
        torch.xdev.synchronize(dev)
    out = {"slow": w1._get_duration(), "behind": w2._get_duration(),
           "sum": float(a[0].item() + b[0].item())}
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    if dev.type != "cpu":
        torch.xdev.synchronize(dev)
    out["coalesced"] = [w._get_duration() for w in cm.works]
    return out


def duration_without_timing(rank, world):
    w = dist.all_reduce(torch.ones(4), async_op=True)
    w.wait()
    return _error(w._get_duration)


def nan_check(rank, world, device="cpu"):
    """Each case: what every rank raised (None: nothing)."""
    dev = torch.device(device, rank % 2) if device != "cpu" else torch.device("cpu")
    out = {}

    def allreduce_with_nan_at(bad, dtype=torch.float32):
        t = torch.ones(64, dtype=torch.float32)
        if rank == bad:
            t[17] = float("nan")
        t = t.to(dtype).to(dev)
        return _error(lambda: dist.all_reduce(t))

    out["allreduce"] = allreduce_with_nan_at(1)
    out["bf16"] = allreduce_with_nan_at(world - 1, torch.bfloat16)
    if dev.type == "cpu":
        out["fp8"] = allreduce_with_nan_at(0, torch.float8_e5m2)
        out["fp8e4"] = allreduce_with_nan_at(2, torch.float8_e4m3fn)
        out["f64"] = allreduce_with_nan_at(1, torch.float64)
        out["f16"] = allreduce_with_nan_at(0, torch.float16)
    # broadcast: only the root's tensor is data; a NaN in a receiver's buffer is not fed.
    buf = torch.full((8,), float("nan") if rank != 0 else 2.0, device=dev)
    out["broadcast_receiver_nan"] = _error(lambda: dist.broadcast(buf, src=0))
    out["broadcast_value"] = buf.cpu().tolist()
    bad_root = torch.full((8,), float("nan") if rank == 0 else 0.0, device=dev)
    out["broadcast_root_nan"] = _error(lambda: dist.broadcast(bad_root, src=0))
    gathered = [torch.zeros(4, device=dev) for _ in range(world)]
    mine = torch.full((4,), float("nan") if rank == 2 else 1.0, device=dev)
    out["all_gather"] = _error(lambda: dist.all_gather(gathered, mine))
    ints = torch.full((4,), rank, dtype=torch.int64, device=dev)
    out["ints"] = _error(lambda: dist.all_reduce(ints))
    # the group goes on: a clean allreduce afterwards gives the sum
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)
    out["after"] = t.cpu().tolist()
    return out


def nan_unchecked(rank, world):
    t = torch.ones(4)
    if rank == 1:
        t[0] = float("nan")
    dist.all_reduce(t)
    return [str(v) for v in t.tolist()]


def late_peer_init(rank, world, port, late_s):
    """Rank 1 comes late_s seconds after rank 0; how long init_process_group took on each,
    and whether the first collective then works."""
    if rank == 1:
        time.sleep(late_s)
    # The store as torchrun's agent hands it over: rank 0's server does not wait for the
    # others to connect (a tcp:// init_method's would, before the backend is even made).
    timeout = datetime.timedelta(seconds=60)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timeout,
                          wait_for_workers=False)
    t0 = time.monotonic()
    dist.init_process_group("xccl", store=store, rank=rank, world_size=world, timeout=timeout)
    init_s = time.monotonic() - t0
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    out = {"init_s": init_s, "sum": t.tolist()}
    dist.destroy_process_group()
    return out


def lonely_nonblocking_init(rank, world, port):
    """Rank 1 never joins. Rank 0's init_process_group returns at once (non-blocking
    creation); its first collective raises the creation's failure once the group's timeout
    (3 s) passes. What rank 0 saw: init seconds, the error, and its seconds."""
    if rank == 1:
        return None
    timeout = datetime.timedelta(seconds=3)
    store = dist.TCPStore("127.0.0.1", port, world, True, timeout=datetime.timedelta(seconds=30),
                          wait_for_workers=False)
    t0 = time.monotonic()
    dist.init_process_group("xccl", store=store, rank=0, world_size=world, timeout=timeout)
    init_s = time.monotonic() - t0
    t0 = time.monotonic()
    err = _error(lambda: dist.all_reduce(torch.ones(4)))
    return {"init_s": init_s, "error": err, "error_s": time.monotonic() - t0}


def profiled(rank, world, device="xdev"):
    """torch's profiler with use_device="xdev": the collective's range (xccl:allreduce) carries
    the time its stream waited for rank 1, 300 ms late; the host call did not wait."""
    dev = torch.device(device, rank % 2)
    t = torch.ones(1 << 16, device=dev)
    dist.all_reduce(t)
    torch.xdev.synchronize(dev)
    dist.barrier()
    with torch.autograd.profiler.profile(use_device="xdev", use_kineto=False) as prof:
        if rank == 1:
            time.sleep(0.3)
        t0 = time.perf_counter()
        work = dist.all_reduce(t, async_op=True)
        call_ms = (time.perf_counter() - t0) * 1e3
        work.wait()
        torch.xdev.synchronize(dev)
    rows = {e.key: e for e in prof.key_averages()}
    r = rows["xccl:allreduce"]
    return {"device_ms": r.device_time_total / 1e3, "cpu_ms": r.cpu_time_total / 1e3,
            "call_ms": call_ms, "sum": float(t[0].item())}


def kineto_traced(rank, world):
    """torch.profiler (Kineto) with ProfilerActivity.PrivateUse1: xdev's copies and the
    collective's hold (rank 1 is 300 ms late) are device events of the trace, each linked to
    the CPU op that queued it, and rows of the exported Chrome trace."""
    import json
    import os
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    dev = torch.device("xdev", rank % 2)
    t = torch.ones(1 << 16, device=dev)
    dist.all_reduce(t)
    torch.xdev.synchronize(dev)
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        # Starting the profiler took one rank 0.6 s longer than the other on a loaded
        # machine: meet again once both are recording (through the store, which the trace
        # does not show), so the only lateness is rank 1's sleep.
        store = dist.distributed_c10d._get_default_store()
        store.add("kineto_recording", 1)
        while store.add("kineto_recording", 0) < world:
            time.sleep(0.001)
        x = torch.ones(1 << 18).to(dev)
        if rank == 1:
            time.sleep(0.3)
        call_at = time.time()  # one clock for both processes (one host)
        dist.all_reduce(x)
        y = x.cpu()
        torch.xdev.synchronize(dev)
    rows = {e.key: e for e in prof.key_averages()}
    out = {"sum": float(y[0].item()), "call_at": call_at}
    for key in ("Memcpy HtoD", "Memcpy DtoH", "xccl allreduce"):
        e = rows.get(key)
        out[key] = None if e is None else (str(e.device_type), e.self_device_time_total / 1e3)
    # The CPU ops that queued them carry their device time.
    out["allreduce_op_ms"] = rows["xccl:allreduce"].device_time_total / 1e3
    out["copy_op_ms"] = rows["aten::_copy_from"].device_time_total / 1e3
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    out["trace"] = sorted({(e["name"], e["cat"]) for e in events
                           if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")})
    # A CPU-only trace records nothing of xdev's.
    with profile(activities=[ProfilerActivity.CPU]) as cpu_only:
        x.to("cpu")
    out["cpu_only_device_events"] = sum(
        1 for e in cpu_only.key_averages() if str(e.device_type) != "DeviceType.CPU")
    return out
