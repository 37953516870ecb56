#!/usr/bin/env bash
# Runs a command as two launched ranks (RANK/WORLD_SIZE/LOCAL_RANK, as torchrun sets them)
# whose out-of-band rendezvous goes through an id file naming ADDR (xccl-tests' launcher
# mode: rank 0 listens and writes "ADDR port", rank 1 reads it and connects there).
#   launch_two.sh ADDR -- COMMAND [ARGS...]
# Exit status: 0 when both ranks exit 0. Each rank is bounded by 90 s.
set -uo pipefail
addr=$1
shift
[ "${1:-}" = "--" ] && shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pids=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r XCCL_TESTS_ID_FILE=$dir/id XCCL_TESTS_ADDR=$addr \
    timeout -k 5 90 "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ "$rc" = 0 ] && echo "launch_two: both ranks passed (rendezvous at $addr)"
exit $rc
