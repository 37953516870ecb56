#!/usr/bin/env bash
# Before/after cost of a core change: builds bench_core at a baseline commit (in a scratch
# git worktree) and at the working tree, then alternates the two binaries PAIRS times per
# size and prints each side's median time and the median of the per-pair differences
# (8 B, in us) and ratios (large sizes). Used for the desync-check cost in BENCHMARKS.md:
#
#   bash bench/compare_core.sh e2bae43~1 10        # baseline = the commit before the checks
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?usage: compare_core.sh BASE_COMMIT [PAIRS]}
PAIRS=${2:-10}
WT=$(mktemp -d /tmp/xccl-base.XXXXXX)
trap 'git worktree remove --force "$WT" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$WT" "$BASE" >/dev/null
cmake -S "$WT" -B "$WT/build" -DCMAKE_BUILD_TYPE=Release -DXCCL_BUILD_TESTS=OFF \
  -DXCCL_BUILD_TOOLS=OFF >/dev/null
cmake --build "$WT/build" -j"$(nproc)" --target bench_core >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target bench_core >/dev/null
for spec in "8 3000" "67108864 20"; do
  set -- $spec
  for i in $(seq "$PAIRS"); do
    a=$("$WT/build/bench/bench_core" --iters "$2" --sizes "$1" | awk -v s="$1" '$1==s{print $2}')
    b=$(build/bench/bench_core --iters "$2" --sizes "$1" | awk -v s="$1" '$1==s{print $2}')
    echo "$a $b"
  done | python3 -c "
import statistics, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
a = [r[0] for r in rows]; b = [r[1] for r in rows]
print(f'size $1 B, {len(rows)} pairs: before {statistics.median(a):.2f} us, after '
      f'{statistics.median(b):.2f} us (medians); per pair: after-before '
      f'{statistics.median([y - x for x, y in rows]):+.2f} us, after/before '
      f'{statistics.median([y / x for x, y in rows]):.4f}')"
done
