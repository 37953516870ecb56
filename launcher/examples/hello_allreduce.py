"""The smallest real job for the templates in launcher/: every rank joins the "xccl" group
(env://, whatever launcher set RANK/WORLD_SIZE/MASTER_ADDR), all-reduces rank + 1 and checks
the sum, then one report line per rank:

    hello_allreduce rank 1/4 local 1/2 host <hostname> sum 10 ok

Runs on CPU tensors by default; --device xdev puts the tensor on the simulated accelerator
(rank i on xdev:<local rank>). Exit status 0 only when the sum is right on this rank.
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist

import torch_xccl  # noqa: F401  registers the "xccl" backend


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=["cpu", "xdev"])
    parser.add_argument("--elements", type=int, default=1024)
    args = parser.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if args.device == "xdev":
        torch.xdev.set_device(local_rank % torch.xdev.device_count())
        device = torch.device("xdev", torch.xdev.current_device())
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend="xccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((args.elements,), float(rank + 1), device=device)
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    ok = bool((t.cpu() == want).all())
    print(f"hello_allreduce rank {rank}/{world} local {local_rank}/{local_world} host "
          f"{socket.gethostname()} sum {t[0].item():g} {'ok' if ok else f'WRONG (want {want:g})'}",
          flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
