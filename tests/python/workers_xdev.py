"""Rank bodies for the stream-ordered backend on xdev (test_xdev_stream_order.py,
test_xdev_training.py) and, with device="cuda", on CUDA (test_cuda.py). Each rank drives
xdev:(rank % 2), or cuda:(rank % the GPU count: every rank on cuda:0 with one GPU), unless a
test says otherwise."""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

N = 4096


def _dev(rank: int, kind: str = "xdev") -> torch.device:
    if kind == "cuda":
        index = rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    torch.xdev.set_device(rank % 2)
    return torch.device("xdev", rank % 2)


def _connected(rank: int) -> torch.device:
    """The rank's device with the group's device communicator already made: its creation
    blocks until every rank is there, which would absorb a peer's lateness and leave the
    collective under test nothing to wait for."""
    dev = _dev(rank)
    dist.all_reduce(torch.ones(1, device=dev))
    torch.xdev.synchronize()
    return dev


# ---------------------------------------------------------------- stream semantics

def wait_orders_current_stream(rank, world, delay_s=1.0):
    """Rank 1 joins late. On rank 0, wait() must return at once (the host is not blocked),
    the Work is not complete yet, and a read queued on the current stream after wait() sees
    the reduced value: right only if wait() made the current stream wait for the collective."""
    dev = _connected(rank)
    x = torch.full((N,), float(rank + 1), device=dev)
    if rank == 1:
        time.sleep(delay_s)
    work = dist.all_reduce(x, async_op=True)
    t0 = time.perf_counter()
    work.wait()
    waited = time.perf_counter() - t0
    done_after_wait = work.is_completed()
    value = x.cpu()  # queued on the current stream: after the collective only if ordered
    out = {"waited": waited, "done_after_wait": done_after_wait,
           "ok": bool((value == sum(range(1, world + 1))).all()), "first": value[0].item()}
    # the future is device-aware: its value read on the current stream is the result too
    y = torch.full((N,), 1.0, device=dev)
    if rank == 1:
        time.sleep(delay_s)
    fut = dist.all_reduce(y, async_op=True).get_future()
    got = fut.wait()[0].cpu()
    out["future_ok"] = bool((got == world).all())
    # a hook-like chain: then() runs after the collective with its streams ordered
    z = torch.full((N,), 2.0, device=dev)
    chained = dist.all_reduce(z, async_op=True).get_future().then(lambda f: f.value()[0] / 2)
    out["then_ok"] = bool((chained.wait().cpu() == world).all())
    return out


def allocator_waits_for_the_collective(rank, world, delay_s=1.0):
    """Rank 0 frees its input right after launching an all_gather and allocates a buffer of
    the same size on the same stream, which it overwrites. The collective only reads the
    input once rank 1 arrives (late): the gathered value is right only if the input's memory
    was recorded on the communication stream (so the allocator did not hand it out)."""
    dev = _connected(rank)
    out = torch.zeros(world * N, device=dev)
    if rank == 1:
        time.sleep(delay_s)
    inp = torch.full((N,), float(rank + 5), device=dev)
    ptr = inp.data_ptr()
    work = dist.all_gather_into_tensor(out, inp, async_op=True)
    del inp
    junk = torch.empty(N, device=dev)
    reused = junk.data_ptr() == ptr
    junk.fill_(-1.0)
    work.wait()
    got = out.cpu().view(world, N)
    want = torch.stack([torch.full((N,), float(r + 5)) for r in range(world)])
    return {"ok": bool(torch.equal(got, want)), "reused": reused,
            "row0": got[0, :3].tolist(), "junk": junk[:2].cpu().tolist()}


def blocking_wait(rank, world, delay_s=0.5):
    """TORCH_XCCL_BLOCKING_WAIT=1: wait() returns only when the collective is done."""
    dev = _connected(rank)
    x = torch.ones(N, device=dev)
    if rank == 1:
        time.sleep(delay_s)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    return {"done_after_wait": work.is_completed(), "ok": bool((x.cpu() == world).all())}


def device_errors(rank, world):
    """Clear errors: a tensor on another device than the group's bound one; cpu and xdev
    tensors mixed in one call; a second device for the same group in one process."""
    errs = {}
    dev = torch.device("xdev", rank % 2)
    other = torch.device("xdev", 1 - rank % 2)

    def grab(name, fn):
        try:
            fn()
            errs[name] = "no error"
        except Exception as e:  # noqa: BLE001 (the message is the point)
            errs[name] = str(e).splitlines()[0]

    grab("bound", lambda: dist.all_reduce(torch.ones(4, device=other)))
    grab("mixed", lambda: dist.all_gather_into_tensor(torch.zeros(4 * world, device=dev),
                                                      torch.ones(4)))
    g = dist.new_group(list(range(world)))  # not bound: lazily on the first device used
    dist.all_reduce(torch.ones(4, device=dev), group=g)
    grab("second_device", lambda: dist.all_reduce(torch.ones(4, device=other), group=g))
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)  # the group still works
    errs["after"] = t.cpu().tolist()
    return errs


def split_and_subgroups(rank, world):
    """dist.split_group (needs device_id at init), new_group, new_subgroups on xdev."""
    dev = _dev(rank)
    res = {}
    halves = [list(range(0, world, 2)), list(range(1, world, 2))]
    sub = dist.split_group(split_ranks=[h for h in halves if h])
    t = torch.full((3,), float(rank), device=dev)
    dist.all_reduce(t, group=sub)
    mine = [h for h in halves if rank in h][0]
    res["split"] = t.cpu().tolist() == [float(sum(mine))] * 3
    # Ranks in no group of the split take part (xcclCommSplit's NOCOLOR) and get None.
    pair = dist.split_group(split_ranks=[[0, 1]])
    if rank < 2:
        p = torch.full((2,), float(rank + 1), device=dev)
        dist.all_reduce(p, group=pair)
        res["split_pair"] = p.cpu().tolist() == [3.0, 3.0]
    else:
        res["split_pair"] = pair is None
    g = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        u = torch.ones(2, device=dev)
        dist.all_reduce(u, group=g)
        res["new_group"] = u.cpu().tolist() == [2.0, 2.0]
    s, _ = dist.new_subgroups(group_size=1)
    v = torch.ones(2, device=dev)
    dist.all_reduce(v, group=s)
    res["subgroups"] = v.cpu().tolist() == [1.0, 1.0]
    return res


def collective_failure(rank, world):
    """A collective that fails on the communication stream (rank 1 dies mid-job) surfaces
    as an exception on the survivor, not a hang."""
    dev = _dev(rank)
    x = torch.ones(N, device=dev)
    dist.all_reduce(x)
    if rank == 1:
        x.cpu()  # its part of the first collective done (stream-ordered), then it dies
        os._exit(0)
    err = None
    t0 = time.perf_counter()
    try:
        for _ in range(3):
            dist.all_reduce(x)
            x.cpu()
            time.sleep(0.2)
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return {"err": err, "s": time.perf_counter() - t0}


# ---------------------------------------------------------------- the training stack

def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


class _Branchy(nn.Module):
    """One branch is used only on even steps: find_unused_parameters has work to do."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(8, 4)
        self.step = 0

    def forward(self, x):
        self.step += 1
        return self.a(x) + (self.b(x) if self.step % 2 == 0 else 0)


def _batches(rank, steps=6):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g))
            for _ in range(steps)]


def _train(device, group, rank, hook=None, model_fn=_model, accumulate=False, **ddp_kwargs):
    from contextlib import nullcontext

    from torch.nn.parallel import DistributedDataParallel as DDP

    model = model_fn().to(device)
    ids = [device.index] if device.type in ("xdev", "cuda") else None
    ddp = DDP(model, device_ids=ids, process_group=group, **ddp_kwargs)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    for i, (x, y) in enumerate(_batches(rank)):
        x, y = x.to(device), y.to(device)
        # accumulate: odd steps only accumulate locally (no_sync), even steps sync and step
        skip = accumulate and i % 2 == 0
        with ddp.no_sync() if skip else nullcontext():
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
        if not skip:
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    return [p.detach().cpu() for p in model.parameters()], losses


def _diff(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def ddp_on_xdev(rank, world, device="xdev"):
    """DDP(device_ids=[xdev:i]) over xccl against DDP over gloo on cpu, same seed and data."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    dev = _dev(rank, device)
    gloo = dist.new_group(backend="gloo")
    xccl = dist.group.WORLD
    cpu = torch.device("cpu")
    out = {}
    ref, ref_losses = _train(cpu, gloo, rank)
    got, losses = _train(dev, xccl, rank)
    out["plain"] = _diff(ref, got)
    out["losses_differ_by_rank"] = losses  # compared across ranks by the test

    def bf16_hook(state, bucket):  # torch refuses the stock hook's *name* off CUDA
        return default_hooks.bf16_compress_hook(state, bucket)

    for name, hook in (("fp16", default_hooks.fp16_compress_hook), ("bf16", bf16_hook)):
        r, _ = _train(cpu, gloo, rank, hook)
        g, _ = _train(dev, xccl, rank, hook)
        out[name] = _diff(r, g)
    for name, kw in (("no_sync", {"accumulate": True}),
                     ("unused", {"model_fn": _Branchy, "find_unused_parameters": True}),
                     ("static", {"static_graph": True}),
                     ("small_buckets", {"bucket_cap_mb": 0.0001})):
        r, _ = _train(cpu, gloo, rank, **kw)
        g, _ = _train(dev, xccl, rank, **kw)
        out[name] = _diff(r, g)
    # the DDP paper's way to fill a link: buckets round-robin over several groups. torch 2.13
    # no longer has dist._round_robin_process_groups; a comm hook does the same routing.
    groups = [dist.new_group(), dist.new_group()]

    def round_robin(state, bucket):
        g = groups[bucket.index() % len(groups)]
        buf = bucket.buffer().div_(world)
        return dist.all_reduce(buf, group=g, async_op=True).get_future().then(
            lambda f: f.value()[0])

    g, _ = _train(dev, xccl, rank, round_robin, bucket_cap_mb=0.0001)
    out["round_robin"] = _diff(ref, g)
    return out


def syncbn_on_xdev(rank, world, device="xdev"):
    """SyncBatchNorm under DDP on xdev, each rank half of the batch, against BatchNorm on the
    whole batch in one process: outputs, input and weight gradients, running statistics."""
    import copy

    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _dev(rank, device)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))
    ref = copy.deepcopy(net)
    g = torch.Generator().manual_seed(5)
    per = 3
    full = torch.randn(world * per, 3, 8, 8, generator=g)
    xr = full.clone().requires_grad_()
    yr = ref(xr)
    (yr ** 2).sum().backward()

    sync = nn.SyncBatchNorm.convert_sync_batchnorm(net).to(dev)
    ddp = DDP(sync, device_ids=[dev.index])
    x = full[rank * per:(rank + 1) * per].to(dev).requires_grad_()
    y = ddp(x)
    (y ** 2).sum().backward()
    bn, bn_ref = sync[1], ref[1]
    return {
        "out": (y.detach().cpu() - yr.detach()[rank * per:(rank + 1) * per]).abs().max().item(),
        "grad_in": (x.grad.cpu() - xr.grad[rank * per:(rank + 1) * per]).abs().max().item(),
        # DDP averages over ranks; the single process summed the whole batch's loss
        "grad_w_rel": max((p.grad.cpu() * world - q.grad).abs().max().item()
                          / max(1.0, q.grad.abs().max().item())
                          for p, q in zip(sync.parameters(), ref.parameters())),
        "running": max((bn.running_mean.cpu() - bn_ref.running_mean).abs().max().item(),
                       (bn.running_var.cpu() - bn_ref.running_var).abs().max().item()),
    }


def zero_on_xdev(rank, world):
    """ZeroRedundancyOptimizer over xccl on xdev against the same over gloo on cpu."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    dev = _dev(rank)
    results = {}
    for name, device, group in (("gloo", torch.device("cpu"), dist.new_group(backend="gloo")),
                                ("xccl", dev, dist.group.WORLD)):
        model = _model().to(device)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                      process_group=group, lr=0.01)
        for x, y in _batches(rank):
            opt.zero_grad()
            nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad, group=group)
                p.grad /= world
            opt.step()
        results[name] = [p.detach().cpu() for p in model.parameters()]
    return {"diff": _diff(results["gloo"], results["xccl"])}


def fsdp2_on_xdev(rank, world, device="xdev"):
    """fully_shard (FSDP2) on an xdev mesh: all_gather_into_tensor / reduce_scatter_tensor on
    the communication stream. Against the unsharded model trained in one process on the
    concatenated batch (the mean loss over ranks equals the loss over the whole batch)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dev = _dev(rank, device)
    mesh = init_device_mesh(device, (world,))
    ref = _model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    model = _model().to(dev)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    full = _train_beside_reference(model, opt, ref, ref_opt, rank, world, dev)
    return {"diff": _diff([p.detach() for p in ref.parameters()], full)}


def _train_beside_reference(model, opt, ref, ref_opt, rank, world, dev):
    """Four SGD steps of the sharded model on this rank's batches and of the one-process
    reference on every rank's; returns the sharded model's full parameters on the cpu."""
    batches = [_batches(r) for r in range(world)]
    for step in range(4):
        xs = torch.cat([batches[r][step][0] for r in range(world)])
        ys = torch.cat([batches[r][step][1] for r in range(world)])
        ref_opt.zero_grad()
        nn.functional.mse_loss(ref(xs), ys).backward()
        ref_opt.step()
        x, y = batches[rank][step]
        opt.zero_grad()
        nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
        opt.step()
    return [p.full_tensor().detach().cpu() for p in model.parameters()]


def fsdp2_from_cpu_model(rank, world):
    """fully_shard of a model still on the cpu, on an xdev mesh: FSDP2 moves every parameter
    to the mesh's device in place (param.data = param.to(xdev)), which raised "set_data ...
    incompatible tensor type" before xdev answered _has_compatible_shallow_copy_type. The
    optimizer is made after sharding from the same Parameter objects FSDP2 moved."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dev = _dev(rank)
    mesh = init_device_mesh("xdev", (world,))
    ref = _model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    model = _model()  # on the cpu
    before = [id(p) for p in model.parameters()]
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    devices = sorted({str(p.device) for p in model.parameters()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    full = _train_beside_reference(model, opt, ref, ref_opt, rank, world, dev)
    return {"diff": _diff([p.detach() for p in ref.parameters()], full), "devices": devices,
            "params_kept": len(before) == len(list(model.parameters()))}


def default_backend_on_xdev(rank, world, port, select="set_device"):
    """init_process_group() with no backend, as an unchanged accelerator-generic script
    calls it, in a process that uses xdev: torch picks its accelerator's default backend,
    which for xdev is xccl (Backend.default_device_backend_map["xdev"]). ``select``: the
    script calls torch.xdev.set_device first ("set_device"), nothing ("none": the parent sets
    TORCH_XCCL_ACCELERATOR=xdev), or only init_device_mesh("xdev", ...) ("mesh")."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    out = {"available_before": torch.accelerator.is_available()}
    if select == "set_device":
        torch.xdev.set_device(rank % 2)
    if select == "mesh":
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("xdev", (world,))
        out["mesh_device"] = mesh.device_type
    else:
        dist.init_process_group()
    out["accelerator"] = str(torch.accelerator.current_accelerator(check_available=True))
    out["backend"] = dist.get_backend()  # "undefined" for a backend torch picks (lazily)
    dev = torch.device("xdev", torch.xdev.current_device())
    t = torch.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    out["sum"] = t.cpu().tolist()
    backend = dist.group.WORLD._get_backend(dev)  # made by the first collective
    out["xccl"] = bool(__import__("torch_xccl")._C._is_xccl_backend(backend))
    return out


def dtensor_on_xdev(rank, world):
    """DTensor's redistribute over xccl: Shard(0) -> Replicate (all_gather), Partial ->
    Replicate (all_reduce), Partial -> Shard (reduce_scatter)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    _dev(rank)
    mesh = init_device_mesh("xdev", (world,))
    full = torch.arange(world * 4 * 3, dtype=torch.float32).view(world * 4, 3)
    d = distribute_tensor(full.to(f"xdev:{rank % 2}"), mesh, [Shard(0)])
    gathered = d.redistribute(mesh, [Replicate()]).to_local().cpu()
    local = torch.full((world * 2, 3), float(rank + 1), device=f"xdev:{rank % 2}")
    p = DTensor.from_local(local, mesh, [Partial()])
    summed = p.redistribute(mesh, [Replicate()]).to_local().cpu()
    scattered = p.redistribute(mesh, [Shard(0)]).to_local().cpu()
    total = float(sum(range(1, world + 1)))
    return {"gather": bool(torch.equal(gathered, full)),
            "allreduce": bool((summed == total).all()),
            "reduce_scatter": bool((scattered == total).all()) and scattered.shape[0] == 2}
