#!/usr/bin/env bash
# Third-party training stacks, unchanged, on xccl and xdev (docs/INTEGRATIONS.md): installs
# the clients from PyPI beside torch 2.13.0 (never replacing it), runs their integration
# tests and examples, then the whole matrix of tests/clients (every client x cpu over gloo,
# cpu over xccl, xdev over xccl x float32, bf16; two ranks each), and prints it.
#
#   bash scripts/clients.sh                     # everything (about 15-20 min on 2 cores)
#   bash scripts/clients.sh --clients ddp,lightning --precisions bf16
#   XCCL_CLIENTS_INSTALL=0 bash scripts/clients.sh   # use what is installed
#
# Assumes scripts/setup.sh ran (torch 2.13.0 and torch_xccl built). The first DeepSpeed run
# on the cpu builds DeepSpeed's shared-memory allreduce op (minutes, cached afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
constraint=$(mktemp)
trap 'rm -f "$constraint"' EXIT
echo "torch==2.13.0" > "$constraint"
if [ "${XCCL_CLIENTS_INSTALL:-1}" = 1 ]; then
  start=$SECONDS
  $PY -m pip install -q -c "$constraint" transformers accelerate pytorch-lightning
  # DeepSpeed's sdist: DS_BUILD_OPS=0 builds no native op (torch_xccl uses none)
  DS_BUILD_OPS=0 $PY -m pip install -q --no-build-isolation -c "$constraint" deepspeed
  $PY -m pip install -q -c "$constraint" torchft  # torch_xccl.ft (docs/ELASTIC.md)
  echo "== clients.sh: clients installed in $((SECONDS - start)) s"
fi
$PY -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else \
'torch changed: ' + torch.__version__)"
status=0
XCCL_TEST_EXAMPLES=1 $PY -m pytest tests/python/test_integrations.py \
  tests/python/test_clients_sample.py tests/python/test_elastic_examples.py -q -rs \
  --timeout=600 || status=1
$PY tests/clients/matrix.py --json "${XCCL_CLIENTS_JSON:-/tmp/xccl-clients-matrix.json}" "$@" \
  || status=1
exit $status
