"""DeepSpeed ZeRO-2 on xdev over xccl (docs/INTEGRATIONS.md).

    python examples/integrations/deepspeed_xdev.py                      # one process
    torchrun --nproc_per_node=2 examples/integrations/deepspeed_xdev.py  # two ranks

DeepSpeed installed with DS_BUILD_OPS=0 is enough: the optimizer is a torch one.
"""
import os

import deepspeed
import torch
from torch import nn

from torch_xccl.integrations.deepspeed import install


def main():
    # one process without a launcher: the rendezvous torchrun would give
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517")):
        os.environ.setdefault(key, value)
    accelerator = install()  # set_accelerator(XdevAccelerator()), xdev:LOCAL_RANK
    deepspeed.init_distributed(dist_backend=accelerator.communication_backend_name())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    config = {"train_micro_batch_size_per_gpu": 16, "zero_optimization": {"stage": 2},
              "bf16": {"enabled": True}, "zero_allow_untested_optimizer": True,
              "steps_per_print": 1000}
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=0.01), config=config)
    rank = int(os.environ["RANK"])
    g = torch.Generator().manual_seed(rank)
    for _ in range(8):
        x = torch.randn(16, 8, generator=g)
        y = x.sum(dim=1, keepdim=True).tanh()
        loss = nn.functional.mse_loss(engine(x.to(engine.device, torch.bfloat16)).float(),
                                      y.to(engine.device))
        engine.backward(loss)
        engine.step()
    print(f"deepspeed rank {rank}: accelerator {accelerator.device_name()}, engine on "
          f"{engine.device}, backend {torch.distributed.get_backend()}, "
          f"last loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
