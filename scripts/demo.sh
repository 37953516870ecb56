#!/usr/bin/env bash
# Set-up (idempotent), then a 2-process DDP training over backend "xccl" on the simulated
# xdev accelerator (rank i on xdev:i; --device cpu for the CPU), launched with torchrun,
# printing the loss at every step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ${PYTHON:-python3} -m torch.distributed.run --standalone --nproc_per_node=2 \
  examples/ddp_demo/train.py "$@"
