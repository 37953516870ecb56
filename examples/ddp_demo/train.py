"""DDP over xccl on the simulated xdev accelerator (or the CPU), nothing to configure:

    torchrun --nproc_per_node=2 examples/ddp_demo/train.py                # rank i on xdev:i
    torchrun --nproc_per_node=2 examples/ddp_demo/train.py --device cpu
    python -m torch.distributed.launch --nproc_per_node=2 --use-env examples/ddp_demo/train.py

Trains a small MLP on a synthetic regression task and prints the loss per step (rank 0) and
a parameter checksum from every rank at the end (equal on all ranks = DDP kept them in sync).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_xccl  # noqa: F401  registers the "xccl" backend


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--backend", default="xccl")
    parser.add_argument("--device", default="xdev", choices=["xdev", "cpu"],
                        help="xdev: rank i trains on xdev:i (the simulated accelerator)")
    parser.add_argument("--local-rank", "--local_rank", type=int,
                        default=int(os.environ.get("LOCAL_RANK", 0)))  # launch compat
    args = parser.parse_args()

    if args.device == "xdev":
        torch.xdev.set_device(args.local_rank % torch.xdev.device_count())
        device = torch.device("xdev", torch.xdev.current_device())
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=args.backend)  # env:// from torchrun / launch --use-env
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same initial model everywhere (DDP also broadcasts it)
    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    true_w = torch.randn(16, 1, generator=torch.Generator().manual_seed(1))
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    if rank == 0:
        print(f"backend={dist.get_backend()} device={device} world_size={world} "
              f"torch={torch.__version__} torch_xccl={torch_xccl.__version__} "
              f"libxccl={torch_xccl.xccl_version()}", flush=True)
    for step in range(args.steps):
        x = torch.randn(32, 16, generator=data)
        y = x @ true_w + 0.01 * torch.randn(32, 1, generator=data)
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step:3d}  loss {avg.item():.5f}", flush=True)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    # one write per line, so the two ranks' lines do not interleave mid-line
    sys.stdout.write(f"rank {rank} final parameter checksum {checksum:.10f}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
