"""Rank bodies for test_symmetric_memory.py: torch's symmetric memory
(torch.distributed._symmetric_memory) on xdev with backend xccl."""
import os
import time

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

from workers_observability import _error  # the message of what fn raised, or None


def _dev(rank):
    return torch.device("xdev", rank % 2)


def _fold(parts, op):
    """The rank-order fold ((p0 op p1) op p2)... on the CPU, in the parts' dtype."""
    acc = parts[0].clone()
    for p in parts[1:]:
        if op in ("sum", "avg"):
            acc = acc + p
        elif op == "max":
            acc = torch.maximum(acc, p)
        else:
            acc = torch.minimum(acc, p)
    if op == "avg":
        acc = acc / len(parts)
    return acc


def _inputs(world, n, dtype, seed=7):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return [torch.randn(n, generator=g).to(dtype) for _ in range(world)]
    return [torch.randint(-1000, 1000, (n,), generator=g, dtype=dtype) for _ in range(world)]


def peers_and_signals(rank, world):
    """Every rank's buffer through get_buffer, written by a peer and announced by put_signal,
    and the handle's description."""
    dev = _dev(rank)
    group = dist.group.WORLD
    t = symm_mem.empty(4096, dtype=torch.int32, device=dev)
    t.fill_(100 + rank)
    h = symm_mem.rendezvous(t, group)
    again = symm_mem.rendezvous(t, group.group_name)  # cached: no second collective
    h.barrier()
    seen = [h.get_buffer(r, (4096,), torch.int32)[:2].cpu().tolist() for r in range(world)]
    # Write into the right neighbour's buffer, then signal it; the left neighbour's write
    # must be whole in ours once its signal is consumed.
    right, left = (rank + 1) % world, (rank - 1) % world
    h.barrier()
    for rounds in range(20):
        h.get_buffer(right, (4096,), torch.int32).fill_(1000 * rounds + rank)
        h.put_signal(right)
        h.wait_signal(left)
        mine = t.cpu()
        assert bool((mine == 1000 * rounds + left).all()), (rounds, mine[:4])
        h.barrier()  # nobody overwrites before every rank has read
    torch.xdev.synchronize(dev)
    pads = h.get_signal_pad(rank, (world * 4,), torch.int32).cpu()
    return {
        "backend": symm_mem.get_backend(dev),
        "rank": h.rank, "world": h.world_size, "size": h.buffer_size,
        "same": again.buffer_ptrs == h.buffer_ptrs,
        "ptrs": len([p for p in h.buffer_ptrs if p]),
        "seen": seen, "pads_zero": bool((pads == 0).all()),
        "direct": t.device.type,
    }


def reductions(rank, world, dtype_name):
    """one_shot / two_shot (in place and out) / copy variants against the CPU rank-order
    fold, bit for bit, at sizes that do not divide by the world."""
    dtype = getattr(torch, dtype_name)
    dev = _dev(rank)
    name = dist.group.WORLD.group_name
    out = {}
    ops = ("sum", "avg", "max", "min") if dtype.is_floating_point else ("sum", "max", "min")
    for n in (1, 7, 1000, 65537):
        parts = _inputs(world, n, dtype, seed=n)
        buf = symm_mem.empty(n, dtype=dtype, device=dev)
        symm_mem.rendezvous(buf, name)
        for op in ops:
            want = _fold(parts, op)
            buf.copy_(parts[rank].to(dev))
            one = torch.ops.symm_mem.one_shot_all_reduce(buf, op, name).cpu()
            outbuf = torch.empty(n, dtype=dtype, device=dev)
            torch.ops.symm_mem.one_shot_all_reduce_out(buf, op, name, outbuf)
            local = parts[rank].to(dev)
            copied = torch.ops.symm_mem.one_shot_all_reduce_copy(buf, local, op, name).cpu()
            buf.copy_(parts[rank].to(dev))
            two_out = torch.empty(n, dtype=dtype, device=dev)
            torch.ops.symm_mem.two_shot_all_reduce_out(buf, op, name, two_out)
            buf.copy_(parts[rank].to(dev))
            torch.ops.symm_mem.two_shot_all_reduce_(buf, op, name)
            got = {"one_shot": one, "one_shot_out": outbuf.cpu(), "copy": copied,
                   "two_shot_out": two_out.cpu(), "two_shot": buf.cpu()}
            for k, v in got.items():
                out[f"{n}/{op}/{k}"] = bool(torch.equal(v, want))
    return out


def one_shot_into_its_own_buffer(rank, world):
    """out inside the symmetric buffer itself (a view of it): the result is still the sum
    (folded aside, so the peers never read a half-written buffer)."""
    dev = _dev(rank)
    name = dist.group.WORLD.group_name
    buf = symm_mem.empty(2048, device=dev)
    symm_mem.rendezvous(buf, name)
    buf[:1024].fill_(rank + 1)
    torch.ops.symm_mem.one_shot_all_reduce_out(buf[:1024], "sum", name, buf[1024:])
    torch.ops.symm_mem.one_shot_all_reduce_out(buf[:1024], "sum", name, buf[:1024])
    return {"second_half": buf[1024:].cpu().unique().tolist(),
            "first_half": buf[:1024].cpu().unique().tolist()}


def stores(rank, world):
    dev = _dev(rank)
    t = torch.zeros(16, dtype=torch.uint32, device=dev)
    torch.ops.symm_mem.memset32_(t, 2, 7, 3)
    torch.ops.symm_mem.stream_write_value32_(t, 10, 9)
    bad = _error(lambda: torch.ops.symm_mem.memset32_(t, 14, 1, 5))
    return {"values": t.cpu().to(torch.int64).tolist(), "bad": bad}


def bad_input(rank, world):
    dev = _dev(rank)
    group = dist.group.WORLD
    name = group.group_name
    out = {}
    plain = torch.ones(64, device=dev)
    out["plain"] = _error(lambda: symm_mem.rendezvous(plain, group))
    out["op"] = _error(lambda: torch.ops.symm_mem.one_shot_all_reduce(
        symm_mem.empty(8, device=dev), "prod", name))
    # Different sizes on different ranks: every rank refuses, naming both.
    uneven = symm_mem.empty(256 * (1 + (rank == 1)), device=dev)
    out["sizes"] = _error(lambda: symm_mem.rendezvous(uneven, group))
    t = symm_mem.empty(64, device=dev)
    h = symm_mem.rendezvous(t, group)
    out["channel"] = _error(lambda: h.barrier(channel=1 << 20))
    out["peer"] = _error(lambda: h.put_signal(world + 3))
    # A wait nobody answers ends at its timeout as the stream's error, naming the peer.
    if rank == 0:
        h.wait_signal(1, channel=3, timeout_ms=300)
        out["timeout"] = _error(lambda: torch.xdev.synchronize(dev))
    dist.barrier()
    return out


def peer_exits_while_awaited(rank, world):
    """Rank 1 exits; rank 0's wait for its signal fails within a second or two, naming it."""
    dev = _dev(rank)
    t = symm_mem.empty(64, device=dev)
    h = symm_mem.rendezvous(t, dist.group.WORLD)
    h.barrier()
    torch.xdev.synchronize(dev)
    if rank == 1:
        os._exit(0)
    start = time.monotonic()
    h.wait_signal(1)
    err = _error(lambda: torch.xdev.synchronize(dev))
    return {"error": err, "seconds": time.monotonic() - start}


def reduce_scatter(rank, world):
    """reduce_scatter_out along dim 0 and along the last dim, against the CPU fold."""
    dev = _dev(rank)
    name = dist.group.WORLD.group_name
    parts = _inputs(world, 6 * 4 * world, torch.float32, seed=11)
    buf = symm_mem.empty(6, 4 * world, device=dev)
    symm_mem.rendezvous(buf, name)
    buf.copy_(parts[rank].view(6, 4 * world).to(dev))
    want = _fold([p.view(6, 4 * world) for p in parts], "sum")
    rows = torch.empty(6 // world if 6 % world == 0 else 0, 4 * world, device=dev)
    out = {}
    if 6 % world == 0:
        torch.ops.symm_mem.reduce_scatter_out(buf, name, False, rows)
        out["rows"] = bool(torch.equal(rows.cpu(), want.chunk(world, 0)[rank]))
    cols = torch.empty(6, 4, device=dev)
    torch.ops.symm_mem.reduce_scatter_out(buf, name, True, cols)
    out["cols"] = bool(torch.equal(cols.cpu(), want.chunk(world, 1)[rank].contiguous()))
    odd = symm_mem.empty(6, 5, device=dev)
    symm_mem.rendezvous(odd, name)
    out["uneven"] = _error(lambda: torch.ops.symm_mem.reduce_scatter_out(
        odd, name, True, torch.empty(6, 5, device=dev)))
    return out


def a_failed_peer_is_not_waited_for(rank, world):
    """Rank 2 exits; rank 1's wait for it fails, which marks rank 1's pad; rank 0, waiting for
    rank 1 (alive, but it will never signal), fails at once instead of at the timeout."""
    dev = _dev(rank)
    t = symm_mem.empty(64, device=dev)
    h = symm_mem.rendezvous(t, dist.group.WORLD)
    h.barrier()
    torch.xdev.synchronize(dev)
    dist.barrier()
    if rank == 2:
        os._exit(0)
    start = time.monotonic()
    h.wait_signal(rank + 1)  # rank 1 waits for rank 2, rank 0 for rank 1
    err = _error(lambda: torch.xdev.synchronize(dev))
    out = {"error": err, "seconds": time.monotonic() - start}
    time.sleep(0.5)  # rank 1 stays alive while rank 0 still waits
    return out


def tiles(rank, world):
    """tile_reduce and multi_root_tile_reduce against the CPU fold: a strided 2-D view of a
    symmetric buffer, a column-strided one, an out_tile inside the buffer (folded aside),
    and the bad arguments."""
    dev = _dev(rank)
    name = dist.group.WORLD.group_name
    parts = _inputs(world, 12 * 10, torch.float32, seed=23)
    buf = symm_mem.empty(12, 10, device=dev)
    symm_mem.rendezvous(buf, name)
    buf.copy_(parts[rank].view(12, 10).to(dev))
    whole = _fold([p.view(12, 10) for p in parts], "sum")
    out = {}
    # Rows 2..6, columns 3..8: a view with stride (10, 1).
    tile = buf[2:7, 3:9]
    dst = torch.full((5, 6), -1.0, device=dev)
    torch.ops.symm_mem.tile_reduce(tile, dst, 1, name)
    want = whole[2:7, 3:9] if rank == 1 else torch.full((5, 6), -1.0)
    out["rows"] = bool(torch.equal(dst.cpu(), want))
    # Every other column (stride (10, 2)), max, into a transposed (strided) out on root 0.
    tile = buf[:, ::2]
    dst = torch.zeros(5, 12, device=dev).t()
    torch.ops.symm_mem.tile_reduce(tile, dst, 0, name, "max")
    if rank == 0:
        want = _fold([p.view(12, 10)[:, ::2] for p in parts], "max")
        out["strided_max"] = bool(torch.equal(dst.cpu(), want))
    # Into the root's own symmetric buffer, over the tile the others still read.
    torch.xdev.synchronize(dev)
    dist.barrier()
    torch.ops.symm_mem.tile_reduce(buf[0:4, :], buf[2:6, :], 2 % world, name)
    torch.xdev.synchronize(dev)
    if rank == 2 % world:
        out["aside"] = bool(torch.equal(buf[2:6, :].cpu(), whole[0:4, :]))
    # Tile k (rows 3k..3k+2) folds into rank k's out; ranks past the tiles take part only.
    dist.barrier()
    buf.copy_(parts[rank].view(12, 10).to(dev))
    tiles_ = [buf[3 * k:3 * k + 3, :] for k in range(min(world, 4))]
    dst = torch.full((3, 10), -1.0, device=dev)
    torch.ops.symm_mem.multi_root_tile_reduce(tiles_, dst, list(range(len(tiles_))), name)
    want = whole[3 * rank:3 * rank + 3, :] if rank < len(tiles_) else torch.full((3, 10), -1.0)
    out["multi"] = bool(torch.equal(dst.cpu(), want))
    out["twice"] = _error(lambda: torch.ops.symm_mem.multi_root_tile_reduce(
        tiles_[:2], dst, [rank, rank], name))
    out["root"] = _error(lambda: torch.ops.symm_mem.tile_reduce(
        buf[0:2, :], torch.empty(2, 10, device=dev), world, name))
    out["shape"] = _error(lambda: torch.ops.symm_mem.tile_reduce(
        buf[0:2, :], torch.empty(3, 10, device=dev), 0, name))
    out["dims"] = _error(lambda: torch.ops.symm_mem.tile_reduce(
        buf[0], torch.empty(10, device=dev), 0, name))
    torch.xdev.synchronize(dev)
    return out


def multimem_and_remote(rank, world):
    """The multimem ops (no multicast on xdev: the one-shot / two-shot results) and
    get_remote_tensors, against the CPU fold and every rank's values."""
    dev = _dev(rank)
    name = dist.group.WORLD.group_name
    parts = _inputs(world, 1000, torch.float32, seed=31)
    buf = symm_mem.empty(1000, device=dev)
    symm_mem.rendezvous(buf, name)
    buf.copy_(parts[rank].to(dev))
    want = _fold(parts, "sum")
    out = {}
    out["one_shot"] = bool(torch.equal(
        torch.ops.symm_mem.multimem_one_shot_all_reduce(buf, "sum", name).cpu(), want))
    dst = torch.full((1000,), -1.0, device=dev)
    torch.ops.symm_mem.multimem_one_shot_reduce_out(buf, "sum", 1, name, dst)
    out["reduce_out"] = bool(torch.equal(dst.cpu(), want if rank == 1 else torch.full((1000,), -1.0)))
    gathered = torch.empty(1000 * world, device=dev)
    torch.ops.symm_mem.multimem_all_gather_out(buf, name, gathered)
    out["all_gather"] = bool(torch.equal(gathered.cpu(), torch.cat(parts)))
    view = buf[10:20]
    remote = torch.ops.symm_mem.get_remote_tensors(view, name)
    torch.xdev.synchronize(dev)
    out["remote"] = [bool(torch.equal(t.cpu(), parts[r][10:20])) for r, t in enumerate(remote)]
    torch.ops.symm_mem.multimem_all_reduce_(buf, "sum", name)
    out["all_reduce_"] = bool(torch.equal(buf.cpu(), want))
    return out


def _splits_for(rank, world, ne):
    """Rows rank sends to (peer, expert), rank-major, different on every rank."""
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randint(0, 5, (world * ne,), generator=g)


def shuffles(rank, world):
    """all_to_all_vdev, _2d (dispatch to experts, padded) and _2d_offset (the combine that
    brings every token back): rows tagged with (sender, row) land where the splits say."""
    dev = _dev(rank)
    name = dist.group.WORLD.group_name
    ne, align, cols = 2, 4, 3
    all_splits = [_splits_for(r, world, ne) for r in range(world)]
    inp = symm_mem.empty(64, cols, device=dev)
    symm_mem.rendezvous(inp, name)
    tagged = torch.tensor([[rank * 1000 + i, i, -i] for i in range(64)], dtype=torch.float32)
    inp.copy_(tagged.to(dev))
    out = {}
    # 1-D: peer p gets the sum over experts of what this rank sends it.
    s1 = symm_mem.empty(world, dtype=torch.int64, device=dev)
    symm_mem.rendezvous(s1, name)
    s1.copy_(all_splits[rank].view(world, ne).sum(1).to(dev))
    o1 = torch.full((64 * world, cols), -7.0, device=dev)
    so1 = torch.empty(2, world, dtype=torch.int64, device=dev)
    torch.ops.symm_mem.all_to_all_vdev(inp, o1, s1, so1, name)
    torch.xdev.synchronize(dev)
    got, want_rows, at = so1.cpu(), [], 0
    ok = True
    for s in range(world):
        sp = all_splits[s].view(world, ne).sum(1)
        n, start = int(sp[rank]), int(sp[:rank].sum())
        ok &= int(got[0][s]) == n and int(got[1][s]) == at
        want_rows.append(torch.tensor([[s * 1000 + i, i, -i] for i in range(start, start + n)],
                                      dtype=torch.float32).view(-1, cols))
        at += n
    ok &= bool(torch.equal(o1.cpu()[:at], torch.cat(want_rows)))
    out["1d"] = ok
    # 2-D dispatch: expert-major out, each expert's rows padded to `align`.
    s2 = symm_mem.empty(world * ne, dtype=torch.int64, device=dev)
    symm_mem.rendezvous(s2, name)
    s2.copy_(all_splits[rank].to(dev))
    o2 = symm_mem.empty(64 * world + align * ne, cols, device=dev)
    symm_mem.rendezvous(o2, name)
    o2.fill_(-7.0)
    so2 = symm_mem.empty(2, world * ne, dtype=torch.int64, device=dev)
    symm_mem.rendezvous(so2, name)
    torch.ops.symm_mem.all_to_all_vdev_2d(inp, o2, s2, so2, name, major_align=align)
    torch.xdev.synchronize(dev)
    got, ok, at = so2.cpu(), True, 0
    for e in range(ne):
        base = at
        for s in range(world):
            sp = all_splits[s]
            i = rank * ne + e
            n, start = int(sp[i]), int(sp[:i].sum())
            ok &= int(got[0][e * world + s]) == n and int(got[1][e * world + s]) == at
            rows = o2.cpu()[at:at + n]
            ok &= all(int(rows[k][0]) == s * 1000 + start + k for k in range(n))
            at += n
        length = at - base
        at = base + max((length + align - 1) // align * align, align)
    out["2d"] = ok
    # 2-D combine: send every received split back to where it came from.
    back = symm_mem.empty(64, cols, device=dev)
    symm_mem.rendezvous(back, name)
    back.fill_(-7.0)
    so3 = torch.empty(2, world * ne, dtype=torch.int64, device=dev)
    torch.ops.symm_mem.all_to_all_vdev_2d_offset(o2, back, so2, so3, name)
    torch.xdev.synchronize(dev)
    total = int(all_splits[rank].sum())
    out["combine"] = bool(torch.equal(back.cpu()[:total], tagged[:total])) and bool(
        torch.equal(so3.cpu()[0], all_splits[rank]))
    # Too small an out: the stream fails with the reason.
    small = torch.empty(1, cols, device=dev)
    torch.ops.symm_mem.all_to_all_vdev(inp, small, s1, so1, name)
    out["small"] = _error(lambda: torch.xdev.synchronize(dev))
    return out
