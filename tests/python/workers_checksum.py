"""Rank bodies for test_checksum.py: XCCL_CHECKSUM=1 through torch."""
import torch
import torch.distributed as dist


def allreduce_outcome(rank, world, device="cpu"):
    """A 1 MiB all_reduce: its sum, or the error every rank raises."""
    dev = torch.device(device, rank % 2) if device != "cpu" else torch.device("cpu")
    t = torch.full((1 << 18,), float(rank + 1), device=dev)
    try:
        dist.all_reduce(t)
        if dev.type != "cpu":
            torch.xdev.synchronize(dev)
        return {"sum": float(t.sum().item()), "error": None}
    except Exception as e:  # noqa: BLE001 - the message is what the test checks
        return {"sum": None, "error": f"{type(e).__name__}: {e}"}
