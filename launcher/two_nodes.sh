#!/usr/bin/env bash
# The seed's two-node command (docs/LAUNCH.md): run it once on each of two nodes.
#
#   launcher/two_nodes.sh NODE_RANK MASTER_ADDR [script [args...]]
#
#   node A (10.0.0.1):  launcher/two_nodes.sh 0 10.0.0.1 train.py --epochs 10
#   node B:             launcher/two_nodes.sh 1 10.0.0.1 train.py --epochs 10
#
# NODE_RANK is 0 on the node whose address is MASTER_ADDR and 1 on the other; the script
# defaults to launcher/examples/hello_allreduce.py. torch.distributed.launch (--use-env)
# starts NPROC_PER_NODE ranks per node with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
# MASTER_PORT set; `torchrun` with the same flags does the same.
#
# Environment:
#   NPROC_PER_NODE      ranks per node (default 2)
#   MASTER_PORT         the torch store's port on node 0 (default 2289)
#   PYTHON              the interpreter (default python3)
#   XCCL_SOCKET_IFNAME  the interface the nodes share, when they have several (docs/ENV.md)
set -euo pipefail
if [ $# -lt 2 ] || ! [[ $1 =~ ^[01]$ ]]; then
  echo "usage: $0 NODE_RANK MASTER_ADDR [script [args...]]" >&2
  echo "two_nodes.sh: NODE_RANK must be 0 or 1, then MASTER_ADDR" >&2
  exit 2
fi
node_rank=$1 master_addr=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
script=${1:-$here/examples/hello_allreduce.py}
if [ $# -gt 0 ]; then shift; fi
set -x
exec "${PYTHON:-python3}" -m torch.distributed.launch --nnodes=2 --node_rank="$node_rank" \
  --master_addr="$master_addr" --master_port="${MASTER_PORT:-2289}" \
  --nproc_per_node "${NPROC_PER_NODE:-2}" --use-env "$script" "$@"
