#!/usr/bin/env python3
"""Host cost of one dist.all_reduce call in a one-rank xccl group: cpu tensors (cpu), xdev
tensors pipelined (stream), xdev with a synchronize after every call (sync). No peer, so no
peer noise: what is left is the backend's and the device's own work per call.

Usage: python bench/xdev_call_cost.py cpu,stream,sync [calls]
"""
import sys
import time

import torch
import torch.distributed as dist

import torch_xccl  # noqa: F401  (routes "xccl", registers xdev)


def main():
    modes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["cpu", "stream", "sync"]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    torch.set_num_threads(1)
    dist.init_process_group("xccl", store=dist.HashStore(), rank=0, world_size=1)
    for mode in modes:
        t = torch.ones(2) if mode == "cpu" else torch.ones(2, device="xdev:0")
        for _ in range(500):
            dist.all_reduce(t)
        torch.xdev.synchronize()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                dist.all_reduce(t)
                if mode == "sync":
                    torch.xdev.synchronize()
            torch.xdev.synchronize()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        print(f"{mode:>6}: {best:.2f} us per call (best of 5 x {n})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
