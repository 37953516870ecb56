"""A training job that survives a worker's death: torchrun --max-restarts with xccl.

    torchrun --nproc-per-node 2 --max-restarts 1 examples/elastic_restart/train.py \\
        --ckpt-dir /tmp/elastic_ckpt --device xdev
    ELASTIC_FAIL_AT=1:5:kill torchrun --nproc-per-node 3 --max-restarts 1 \\
        --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29400 \\
        examples/elastic_restart/train.py --ckpt-dir /tmp/elastic_ckpt

Trains a small MLP with DDP (SGD with momentum, a fixed batch per step and rank) and writes
a checkpoint (model and optimizer) after every step, rank 0 only, atomically. On start it
resumes from the checkpoint if there is one, so a job that torchrun restarts carries on
where the last completed step left it.

ELASTIC_FAIL_AT=<rank>:<step>[:exit|kill] makes that rank fail at the start of that step in
the first attempt only (TORCHELASTIC_RESTART_COUNT 0): `exit` leaves with status 3 and no
clean-up (a crash), `kill` sends itself SIGKILL. The other ranks then fail in their next
collective and torchrun restarts the whole group.

At the end every rank writes its parameters to <ckpt-dir>/final_rank<r>.pt and prints a
checksum; a run with a failure and a restart must end with the same parameters as one
without (bitwise: the same steps on the same data in the same order), on every rank
(scripts/restart_sweep.py and tests/python/test_restart.py check both).
"""
import argparse
import datetime
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_xccl  # noqa: F401  registers the "xccl" backend


def fail_point():
    """(rank, step, mode) from ELASTIC_FAIL_AT in the first attempt, else None."""
    spec = os.environ.get("ELASTIC_FAIL_AT", "")
    if not spec or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) != 0:
        return None
    parts = spec.split(":")
    mode = parts[2] if len(parts) > 2 else "exit"
    if len(parts) not in (2, 3) or mode not in ("exit", "kill"):
        raise SystemExit(f"ELASTIC_FAIL_AT={spec!r}: want <rank>:<step>[:exit|kill]")
    return int(parts[0]), int(parts[1]), mode


def batch(step, rank, device):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 16, generator=g)
    y = x.sum(dim=1, keepdim=True).sin() + 0.01 * torch.randn(32, 1, generator=g)
    return x.to(device), y.to(device)


def make_model(device):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    return net, opt


def reference(world, steps):
    """The parameters an uninterrupted `world`-rank run ends with, computed in this process
    without torch.distributed: DDP divides each rank's gradient by the world size and sums
    them, which is what this does (in rank order; the sum may round differently from the
    backend's for 3+ ranks, so compare with a tolerance)."""
    net, opt = make_model("cpu")
    for step in range(steps):
        grads = []
        for rank in range(world):
            net.zero_grad()
            x, y = batch(step, rank, "cpu")
            nn.functional.mse_loss(net(x), y).backward()
            grads.append([p.grad.detach() / world for p in net.parameters()])
        for i, p in enumerate(net.parameters()):
            total = grads[0][i].clone()
            for g in grads[1:]:
                total += g[i]
            p.grad = total
        opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--backend", default="xccl")
    ap.add_argument("--device", default="cpu", choices=["cpu", "xdev"])
    ap.add_argument("--timeout", type=float, default=60, help="process group timeout, seconds")
    args = ap.parse_args()

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "xdev":
        torch.xdev.set_device(local_rank % torch.xdev.device_count())
        device = torch.device("xdev", torch.xdev.current_device())
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()

    net, opt = make_model(device)
    ckpt = os.path.join(args.ckpt_dir, "ckpt.pt")
    start = 0
    if os.path.exists(ckpt):  # a restarted attempt: carry on after the last completed step
        state = torch.load(ckpt, map_location="cpu")
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    model = DDP(net)
    scope = ""  # where this attempt's xccl keys live in torchrun's store (never the last one's)
    if dist.get_backend() == "xccl":
        scope = " " + torch_xccl.describe().split("store_scope=")[-1].rstrip(")")
    print(f"[attempt {attempt}] rank {rank}/{world} backend={args.backend} device={device} "
          f"starts at step {start}{scope}", flush=True)

    fail = fail_point()
    for step in range(start, args.steps):
        if fail and fail[0] == rank and fail[1] == step:
            print(f"[attempt {attempt}] rank {rank} fails at step {step} ({fail[2]})", flush=True)
            if fail[2] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(3)
        x, y = batch(step, rank, device)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if device.type != "cpu":
            # On a device, collectives are ordered on streams and the host does not wait for
            # them (as with NCCL): a gradient allreduce that failed because a peer died shows
            # only at the group's next synchronising call. Without one here, rank 0 could
            # checkpoint a step whose gradients never arrived, and the restarted job would
            # resume from it. A barrier raises if any collective of the step failed.
            dist.barrier()
        if rank == 0:  # after every step; atomically, so a crash never leaves half a file
            tmp = ckpt + ".tmp"
            torch.save({"step": step + 1, "model": net.state_dict(), "opt": opt.state_dict()},
                       tmp)
            os.replace(tmp, ckpt)

    params = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
    torch.save(params, os.path.join(args.ckpt_dir, f"final_rank{rank}.pt"))
    checksum = sum(float(v.double().sum()) for v in params.values())
    sys.stdout.write(f"[attempt {attempt}] rank {rank} done: final parameter checksum "
                     f"{checksum:.12f}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
