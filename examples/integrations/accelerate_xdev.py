"""accelerate on xdev over xccl (docs/INTEGRATIONS.md). The script is an ordinary accelerate
loop; run it through torch_xccl.integrations.accelerate, or call use_xdev() at its top.

    python -m torch_xccl.integrations.accelerate examples/integrations/accelerate_xdev.py
    torchrun --nproc_per_node=2 -m torch_xccl.integrations.accelerate \
        examples/integrations/accelerate_xdev.py
"""
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    accelerator = Accelerator(mixed_precision="bf16")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x = torch.randn(256, 8)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True).tanh()), batch_size=16)
    model, opt, data = accelerator.prepare(model, opt, data)
    for xb, yb in data:
        opt.zero_grad()
        with accelerator.autocast():
            out = model(xb)  # accelerate returns the model's outputs in float32
            inner = torch.mm(xb, xb.T).dtype  # what autocast runs the matmuls in
        loss = nn.functional.mse_loss(out.float(), yb)
        accelerator.backward(loss)
        opt.step()
    print(f"accelerate rank {accelerator.process_index}/{accelerator.num_processes}: "
          f"device {accelerator.device}, matmuls in {inner}, "
          f"last loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
