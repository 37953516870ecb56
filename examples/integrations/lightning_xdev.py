"""PyTorch Lightning on xdev over xccl (docs/INTEGRATIONS.md).

    python examples/integrations/lightning_xdev.py                      # one xdev device
    torchrun --nproc_per_node=2 examples/integrations/lightning_xdev.py  # DDP, two devices

The only xdev lines: the import that registers the names, and accelerator/strategy.
"""
import os

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torch_xccl.integrations.lightning  # noqa: F401  accelerator="xdev", "ddp_xdev", "single_xdev"


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        self.seen = set()
        self.last = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.add(str(x.device))
        loss = nn.functional.mse_loss(self.net(x).float(), y)
        self.last = loss.item()
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def main():
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True).tanh()), batch_size=16)
    devices = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(accelerator="xdev", devices=devices,
                         strategy="ddp_xdev" if devices > 1 else "single_xdev",
                         precision="bf16-mixed", max_epochs=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    model = Regression()
    trainer.fit(model, data)
    print(f"lightning rank {trainer.global_rank}/{trainer.world_size}: trained on "
          f"{sorted(model.seen)} with {trainer.strategy.__class__.__name__}, "
          f"last loss {model.last:.4f}", flush=True)


if __name__ == "__main__":
    main()
