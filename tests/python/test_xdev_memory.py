"""The caching allocator (statistics, reuse, record_stream, out of memory) and pinned memory."""
import textwrap

import pytest
import torch

from xdev_util import run_python

MB = 1 << 20


def test_statistics_follow_allocations():
    torch.xdev.synchronize()
    torch.xdev.empty_cache()
    torch.xdev.reset_peak_memory_stats()
    base = torch.xdev.memory_allocated()
    x = torch.empty(MB, dtype=torch.uint8, device="xdev")
    assert torch.xdev.memory_allocated() == base + MB
    assert torch.xdev.memory_reserved() >= base + MB
    assert torch.xdev.max_memory_allocated() >= base + MB
    del x
    assert torch.xdev.memory_allocated() == base
    assert torch.xdev.memory_reserved() >= MB  # cached, not returned
    assert torch.xdev.max_memory_allocated() >= base + MB
    torch.xdev.empty_cache()
    assert torch.xdev.memory_reserved() == torch.xdev.memory_allocated() == base
    stats = torch.xdev.memory_stats()
    assert stats["allocation.all.current"] >= 0 and "reserved_bytes.all.peak" in stats
    free, total = torch.xdev.mem_get_info()
    assert 0 < free <= total  # total: XCCL_XDEV_MEMORY (16G unless set)


def test_statistics_are_per_device():
    base1 = torch.xdev.memory_allocated(1)
    base2 = torch.xdev.memory_allocated(2)
    x = torch.empty(4 * MB, dtype=torch.uint8, device="xdev:1")
    assert torch.xdev.memory_allocated(1) == base1 + 4 * MB
    assert torch.xdev.memory_allocated(2) == base2
    del x


def test_freed_block_is_reused_on_the_same_stream():
    torch.xdev.synchronize()
    torch.xdev.empty_cache()
    x = torch.empty(MB, device="xdev")
    p = x.data_ptr()
    del x
    y = torch.empty(MB, device="xdev")
    assert y.data_ptr() == p


def test_blocks_are_not_shared_between_allocation_streams():
    torch.xdev.synchronize()
    torch.xdev.empty_cache()
    s = torch.xdev.Stream()
    with torch.xdev.stream(s):
        x = torch.empty(MB, device="xdev")
    p = x.data_ptr()
    del x
    y = torch.empty(MB, device="xdev")  # default stream: must not get s's block
    assert y.data_ptr() != p
    with torch.xdev.stream(s):
        z = torch.empty(MB, device="xdev")
    assert z.data_ptr() == p


def test_record_stream_delays_reuse_until_the_other_stream_is_done():
    torch.xdev.synchronize()
    torch.xdev.empty_cache()  # no other cached block of this size
    s = torch.xdev.Stream()
    x = torch.zeros(MB, device="xdev")
    torch.xdev.synchronize()
    with torch.xdev.stream(s):
        torch.xdev._sleep(500)
        x.fill_(5.0)  # s still uses x after we drop it
    x.record_stream(s)
    p = x.data_ptr()
    del x
    y = torch.empty(MB, device="xdev")
    assert y.data_ptr() != p  # would be a use-after-free on s
    s.synchronize()
    z = torch.empty(MB, device="xdev")
    assert z.data_ptr() == p  # the event on s completed: reusable again


def test_without_record_stream_the_block_is_reused_at_once():
    # The hazard record_stream exists for: the same situation without it reuses the block.
    torch.xdev.synchronize()
    torch.xdev.empty_cache()
    s = torch.xdev.Stream()
    x = torch.zeros(MB, device="xdev")
    with torch.xdev.stream(s):
        torch.xdev._sleep(100)
    p = x.data_ptr()
    del x
    y = torch.empty(MB, device="xdev")
    assert y.data_ptr() == p
    s.synchronize()


def test_out_of_memory_raises_and_process_keeps_working():
    with pytest.raises(torch.OutOfMemoryError, match="xdev out of memory"):
        torch.empty(17 << 30, dtype=torch.uint8, device="xdev")
    assert torch.xdev.memory_stats()["num_ooms"] >= 1
    assert torch.ones(3, device="xdev").sum().item() == 3


def test_cache_is_released_and_retried_before_out_of_memory():
    code = textwrap.dedent("""
        import torch, torch_xccl
        MB = 1 << 20
        x = torch.empty(40 * MB, dtype=torch.uint8, device='xdev')
        del x                                     # 40 MB cached
        y = torch.empty(50 * MB, dtype=torch.uint8, device='xdev')   # fits only without it
        s = torch.xdev.memory_stats()
        print(s['num_alloc_retries'], s['num_ooms'], torch.xdev.memory_reserved() // MB)
        try:
            torch.empty(20 * MB, dtype=torch.uint8, device='xdev')
        except torch.OutOfMemoryError as e:
            print('OOM', 'Tried to allocate' in str(e))
        print(torch.ones(2, device='xdev').sum().item())
    """)
    r = run_python(code, env_extra={"XCCL_XDEV_MEMORY": "64M", "XCCL_XDEV_COUNT": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["1 0 50", "OOM True", "2.0"]


def test_pin_memory_and_is_pinned():
    t = torch.arange(100.0)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and torch.equal(p, t)
    x = p.to("xdev", non_blocking=True)
    back = torch.empty(100).pin_memory()
    back.copy_(x, non_blocking=True)
    torch.xdev.synchronize()
    assert torch.equal(back, t)
    assert torch.empty(4, pin_memory=True).is_pinned()


def test_dataloader_pin_memory():
    ds = torch.utils.data.TensorDataset(torch.arange(12.0).view(6, 2), torch.arange(6))
    loader = torch.utils.data.DataLoader(ds, batch_size=3, pin_memory=True)
    batches = list(loader)
    assert len(batches) == 2
    for xb, yb in batches:
        assert xb.is_pinned() and yb.is_pinned()
        assert torch.equal(xb.to("xdev", non_blocking=True).cpu(), xb)


def test_storage_resize_keeps_the_prefix():
    x = torch.arange(4.0, device="xdev")
    s = x.untyped_storage()
    s.resize_(8 * 4)
    assert s.nbytes() == 32 and s.device.type == "xdev"
    assert torch.equal(torch.tensor([], device="xdev").set_(s).view(torch.float32)[:4].cpu(),
                       torch.arange(4.0))


def test_dataloader_workers_fork_after_xdev_is_in_use():
    torch.ones(1, device="xdev").sum().item()  # the runtime's workers are running
    ds = torch.utils.data.TensorDataset(torch.arange(16.0).view(8, 2))
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True)
    got = torch.cat([b.to("xdev", non_blocking=True) for (b,) in loader]).cpu()
    assert torch.equal(got, torch.arange(16.0).view(8, 2))


def test_fallback_ops_work_in_place_without_copying_their_inputs():
    x = torch.ones(4 * MB, device="xdev")  # 16 MB
    torch.xdev.synchronize()
    torch.xdev.reset_peak_memory_stats()
    before = torch.xdev.memory_allocated()
    p = x.data_ptr()
    x.mul_(3).add_(1)  # both run through the CPU fallback, over x's own memory
    assert x.unfold(0, 2, 2)[:, 0].sum().item() == 2 * MB * 4  # a fallback view, then reduced
    assert x.data_ptr() == p
    assert torch.xdev.max_memory_allocated() - before < MB  # no copy of x was ever made
    assert x[:3].cpu().tolist() == [4.0, 4.0, 4.0]
