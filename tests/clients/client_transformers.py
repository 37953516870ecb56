"""transformers: Trainer fine-tuning a tiny GPT-2 (made from a config, nothing downloaded), as a
torchrun script (the Trainer runs on accelerate).

    torchrun --nproc_per_node=2 client_transformers.py --device xdev --backend xccl \
        --precision bf16 --out DIR

xdev: ``torch_xccl.integrations.accelerate.use_xdev()`` first and ``use_cpu=True`` (accelerate's
host-style process model; the device is xdev:LOCAL_RANK); cpu: ``use_cpu=True`` over gloo or,
with ``--backend xccl``, over a group made with "xccl" first (accelerate keeps it).
bf16: ``TrainingArguments(bf16=True)``, accelerate's autocast on the device.
"""
import shutil
import tempfile

import torch
import torch.distributed as dist

import common

args = common.parse_args()
rank, world, _ = common.rank_info()

if args.device == "xdev":
    from torch_xccl.integrations.accelerate import use_xdev

    use_xdev()  # xdev:LOCAL_RANK, ACCELERATE_TORCH_DEVICE, the xccl group
elif args.backend == "xccl":
    import torch_xccl  # noqa: F401

    dist.init_process_group("xccl")

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

SEQ = 16
config = GPT2Config(vocab_size=64, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
torch.manual_seed(0)
model = GPT2LMHeadModel(config)  # lm_head is tied to wte: the tie must survive the move


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(7)
        self.ids = torch.randint(0, config.vocab_size, (n, SEQ), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


losses = []
compute = set()  # the dtype GPT-2's first MLP matmul ran in: bfloat16 only if autocast was on
model.transformer.h[0].mlp.c_fc.register_forward_hook(lambda m, i, o: compute.add(str(o.dtype)))


class Record(__import__("transformers").TrainerCallback):
    def on_log(self, a, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            losses.append(logs["loss"])


out_dir = tempfile.mkdtemp(prefix="tf-client-")
targs = TrainingArguments(
    output_dir=out_dir, per_device_train_batch_size=4, max_steps=common.STEPS,
    learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], seed=0,
    use_cpu=True, bf16=args.precision == "bf16", dataloader_num_workers=0,
    disable_tqdm=True, ddp_backend="gloo" if args.backend == "gloo" else None,
)
trainer = Trainer(model=model, args=targs, train_dataset=Tokens(64), callbacks=[Record()])
trainer.train()
m = trainer.model.module if hasattr(trainer.model, "module") else trainer.model
tied = m.lm_head.weight is m.transformer.wte.weight
common.save(args, m.parameters(), losses, client="transformers", tied=tied,
            compute_dtypes=sorted(compute),
            param_device=str(next(m.parameters()).device), trainer_device=str(targs.device),
            pg_backend=dist.get_backend() if dist.is_initialized() else None)
shutil.rmtree(out_dir, ignore_errors=True)
