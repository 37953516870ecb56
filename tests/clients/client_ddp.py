"""Plain PyTorch: DistributedDataParallel, or FSDP2 (fully_shard), as a torchrun script.

    torchrun --nproc_per_node=2 client_ddp.py --device xdev --backend xccl \
        --precision bf16 --out DIR [--client fsdp2]

bf16: DDP runs the forward under torch.autocast(device, bfloat16); FSDP2 uses its own
MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32).
"""
import contextlib

import torch
import torch.distributed as dist
from torch import nn

import common

args = common.parse_args({"--client": {"choices": ["ddp", "fsdp2"], "default": "ddp"}})
rank, world, _ = common.rank_info()
device = common.select_device(args)
dist.init_process_group(args.backend)
bf16 = args.precision == "bf16"

model = common.mlp()  # made on the cpu, as most programs do
if args.client == "ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model.to(device), device_ids=[device.index] if device.type != "cpu" else None)
else:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if bf16 else MixedPrecisionPolicy()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)  # moves the cpu model to the mesh's device
opt = torch.optim.AdamW(model.parameters(), lr=0.01)

autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) \
    if bf16 and args.client == "ddp" else contextlib.nullcontext
losses = []
for x, y in common.shard(rank, world):
    opt.zero_grad()
    with autocast():
        out = model(x.to(device))
    loss = nn.functional.mse_loss(out.float(), y.to(device))
    loss.backward()
    opt.step()
    losses.append(loss.item())

if args.client == "fsdp2":
    params = [p.full_tensor() for p in model.parameters()]
else:
    params = list(model.module.parameters())
common.save(args, params, losses, client=args.client,
            param_device=str(next(model.parameters()).device))
dist.destroy_process_group()
