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


def future_of_a_work_done_on_the_caller(rank, world):
    """A blocking allreduce (asyncOp=False: it runs on the calling thread and its Work is
    complete when it returns) whose future is asked for afterwards: with a flip in flight, the
    future carries the Work's error; without, its value."""
    pg = dist.group.WORLD
    opts = dist.AllreduceOptions()
    opts.asyncOp = False
    t = torch.full((1 << 18,), float(rank + 1))
    try:
        w = pg.allreduce([t], opts)
    except Exception as e:  # noqa: BLE001
        return {"at": "call", "error": f"{type(e).__name__}: {e}"}
    done = w.is_completed()
    fut = w.get_future()
    try:
        got = fut.wait()[0]
        return {"at": None, "done": done, "fut_done": fut.done(), "sum": float(got.sum().item())}
    except Exception as e:  # noqa: BLE001
        return {"at": "future", "done": done, "fut_done": fut.done(),
                "error": f"{type(e).__name__}: {e}"}
