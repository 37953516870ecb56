#!/usr/bin/env bash
# Open MPI starts every rank; xcclrun turns each into a torch rank.
#
#   launcher/mpi/run.sh [script [args...]]        # default: launcher/examples/hello_allreduce.py
#
# mpirun gives each process OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_SIZE,LOCAL_RANK}; xcclrun
# (torch_xccl/launcher/environment.py, from_openmpi) maps them to WORLD_SIZE, RANK,
# LOCAL_WORLD_SIZE, LOCAL_RANK and GROUP_RANK (= rank / local size), adds MASTER_ADDR and
# MASTER_PORT, and runs the script in its place (nothing more is spawned). Ranks fill nodes in
# order: PPN per node, so ranks 0..PPN-1 are on the first host.
#
# Environment:
#   NP           ranks in all (default 2)
#   PPN          ranks per node (default NP: one node)
#   HOSTS        mpirun --host list, e.g. node01:4,node02:4 (default: this host only)
#   MASTER_ADDR  address of the first host (default: the first name in HOSTS, else 127.0.0.1)
#   MASTER_PORT  the torch store's port on it (default 29500)
#   MPIRUN_ARGS  more mpirun options, split on spaces (e.g. "--mca oob_tcp_if_include eth0")
#   MPIRUN       the mpirun to use (default: mpirun on PATH, Open MPI's)
# XCCL_* and TORCH_XCCL_* variables set here are exported to every rank (mpirun -x), as are
# PATH, PYTHONPATH and LD_LIBRARY_PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
script=${1:-$here/examples/hello_allreduce.py}
if [ $# -gt 0 ]; then shift; fi

np=${NP:-2}
ppn=${PPN:-$np}
hosts=${HOSTS:-}
if [ -z "${MASTER_ADDR:-}" ]; then
  if [ -n "$hosts" ]; then first=${hosts%%,*}; MASTER_ADDR=${first%%:*}; else MASTER_ADDR=127.0.0.1; fi
fi
export MASTER_ADDR MASTER_PORT=${MASTER_PORT:-29500}

args=(-np "$np" --map-by "ppr:$ppn:node" --bind-to none)
if [ -n "$hosts" ]; then args+=(--host "$hosts"); fi
if [ "$(id -u)" = 0 ]; then args+=(--allow-run-as-root); fi  # containers often run as root
for v in MASTER_ADDR MASTER_PORT PATH PYTHONPATH LD_LIBRARY_PATH $(compgen -e | grep -E '^(TORCH_)?XCCL_' || true); do
  if [ -n "${!v+x}" ]; then args+=(-x "$v"); fi
done
# shellcheck disable=SC2206  # MPIRUN_ARGS is split on purpose
if [ -n "${MPIRUN_ARGS:-}" ]; then args+=(${MPIRUN_ARGS}); fi
set -x
exec "${MPIRUN:-mpirun}" "${args[@]}" xcclrun "$script" "$@"
