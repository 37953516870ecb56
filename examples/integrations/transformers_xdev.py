"""transformers Trainer on xdev over xccl (docs/INTEGRATIONS.md): a tiny GPT-2 from a config.

    python examples/integrations/transformers_xdev.py
    torchrun --nproc_per_node=2 examples/integrations/transformers_xdev.py

Two xdev lines: use_xdev() before the Trainer, and use_cpu=True (accelerate's host-style
process model; the device stays xdev:LOCAL_RANK).
"""
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from torch_xccl.integrations.accelerate import use_xdev


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, vocab, seq):
        self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    use_xdev()
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=2)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, use_cpu=True, bf16=True, max_steps=6,
                                 per_device_train_batch_size=8, learning_rate=1e-3,
                                 logging_steps=2, save_strategy="no", report_to=[],
                                 disable_tqdm=True)
        trainer = Trainer(model=model, args=args, train_dataset=Tokens(96, 128, 32))
        result = trainer.train()
    m = trainer.model.module if hasattr(trainer.model, "module") else trainer.model
    print(f"transformers rank {args.process_index}/{args.world_size}: device {args.device}, "
          f"parameters on {m.lm_head.weight.device}, lm_head tied to wte: "
          f"{m.lm_head.weight is m.transformer.wte.weight}, "
          f"train loss {result.training_loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
