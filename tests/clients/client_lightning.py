"""PyTorch Lightning: a LightningModule trained by Trainer with DDP, as a torchrun script.

    torchrun --nproc_per_node=2 client_lightning.py --device xdev --backend xccl \
        --precision bf16 --out DIR

xdev: ``import torch_xccl.integrations.lightning`` and
``Trainer(accelerator="xdev", strategy="ddp_xdev")``; cpu: Lightning's own cpu accelerator and
DDP strategy with the named process-group backend. Precision "bf16-mixed" or "32-true".
"""
import torch
from torch import nn

import common

args = common.parse_args()
rank, world, _ = common.rank_info()

import pytorch_lightning as pl  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = common.mlp()
        self.losses = []
        self.seen = set()
        self.compute = set()

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.add(str(x.device))
        loss = nn.functional.mse_loss(self(x).float(), y)
        self.losses.append(loss.item())
        return loss

    def forward(self, x):
        out = self.net[0](x)  # the first matmul: bfloat16 only if autocast is on
        self.compute.add(str(out.dtype))
        return self.net[1:](out)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


# the global data in the order common.shard gives each rank its rows: Lightning's
# DistributedSampler (shuffle=False) hands rank r the rows r, r + world, ...
x, y = common.dataset(common.STEPS * world * common.BATCH)
order = torch.arange(len(x)).view(common.STEPS, world, common.BATCH).permute(0, 2, 1).reshape(-1)
loader = DataLoader(TensorDataset(x[order], y[order]), batch_size=common.BATCH, shuffle=False)

if args.device == "xdev":
    import torch_xccl.integrations.lightning  # noqa: F401  (accelerator="xdev", "ddp_xdev")

    accelerator, strategy = "xdev", "ddp_xdev"
else:
    if args.backend == "xccl":
        import torch_xccl  # noqa: F401
    from pytorch_lightning.strategies import DDPStrategy

    accelerator, strategy = "cpu", DDPStrategy(process_group_backend=args.backend)

model = Regression()
trainer = pl.Trainer(accelerator=accelerator, devices=world, strategy=strategy,
                     precision="bf16-mixed" if args.precision == "bf16" else "32-true",
                     max_steps=common.STEPS, max_epochs=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, use_distributed_sampler=True)
trainer.fit(model, loader)
backend = torch.distributed.get_backend()
common.save(args, model.net.parameters(), model.losses, client="lightning",
            batch_devices=sorted(model.seen), compute_dtypes=sorted(model.compute),
            pg_backend=backend)
