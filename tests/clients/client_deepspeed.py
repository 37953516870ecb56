"""DeepSpeed ZeRO stage 1 or 2, as a torchrun script.

    torchrun --nproc_per_node=2 client_deepspeed.py --device xdev --backend xccl \
        --precision bf16 --stage 2 --out DIR

xdev: ``torch_xccl.integrations.deepspeed.install()`` (set_accelerator) before the engine;
cpu: DeepSpeed's cpu accelerator (DS_ACCELERATOR=cpu, set by the caller), over gloo or, with
``--backend xccl``, over a process group made with "xccl" first (DeepSpeed keeps it).
bf16: DeepSpeed's own bf16 mode (bf16 weights and compute, float32 master weights in ZeRO).
The optimizer is a torch one (no DeepSpeed native op is built: DS_BUILD_OPS=0).
"""
import torch
import torch.distributed as dist
from torch import nn

import common

args = common.parse_args({"--stage": {"type": int, "choices": [1, 2], "default": 1}})
rank, world, _ = common.rank_info()
device = common.select_device(args)

import deepspeed  # noqa: E402

if args.device == "xdev":
    from torch_xccl.integrations.deepspeed import install

    accelerator = install()
else:
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if args.backend == "xccl":
        dist.init_process_group("xccl")  # DeepSpeed uses the existing group
deepspeed.init_distributed(dist_backend=args.backend)

model = common.mlp()
config = {
    "train_micro_batch_size_per_gpu": common.BATCH,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": args.stage, "overlap_comm": False},
    "zero_allow_untested_optimizer": True,
    "bf16": {"enabled": args.precision == "bf16"},
    "steps_per_print": 1000,
    "wall_clock_breakdown": False,
}
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
losses = []
for x, y in common.shard(rank, world):
    out = engine(x.to(engine.device, dtype))
    loss = nn.functional.mse_loss(out.float(), y.to(engine.device))
    engine.backward(loss)
    engine.step()
    losses.append(loss.item())

# the float32 master weights ZeRO keeps (bf16: the fp32 copy), gathered on every rank
from deepspeed.utils import safe_get_full_fp32_param  # noqa: E402

params = [safe_get_full_fp32_param(p) for p in engine.module.parameters()]
common.save(args, params, losses, client=f"deepspeed-zero{args.stage}",
            accelerator=accelerator.device_name(), param_device=str(engine.device))
