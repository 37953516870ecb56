"""A few DDP steps whose gradients are large enough (8 MiB) for the size-based algorithms
(ring on one host, hierarchical across hosts); prints the sha256 of every parameter's bytes.
Run under torchrun by test_reproducible.py: with XCCL_REPRODUCIBLE=1 the hash must not
depend on where the ranks live."""
import hashlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_xccl  # noqa: F401

torch.set_num_threads(1)
dist.init_process_group("xccl")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512))
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(1000 + rank)
for _ in range(3):
    x = torch.randn(16, 512, generator=gen) * 10 ** (rank - 1)
    loss = ddp(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().contiguous().numpy().tobytes())
print(f"rank {rank} parameters sha256 {h.hexdigest()} on {os.uname().nodename}", flush=True)
dist.destroy_process_group()
