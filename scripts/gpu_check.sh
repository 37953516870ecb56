#!/usr/bin/env bash
# Everything GPU-side in one command, for a bare GPU machine (docs/CUDA.md, "Running the GPU
# checks"). Run from the repository root:
#
#   bash scripts/gpu_check.sh [--quick] [--dry-run] [--only STEP,STEP] [--skip STEP,STEP]
#                             [--budget SECONDS]
#
# Steps, in order (each with its own hard timeout; one failing does not stop the others, but a
# step whose build failed is skipped with that reason):
#   info       nvidia-smi, torch, nvcc, cores
#   deps       GoogleTest (and CLI11) when the machine lacks them: built from the sources in
#              $XCCL_GPU_DEPS (default .gpu_deps, made by scripts/gpu_deps.sh on a machine
#              with a package registry)
#   core       libxccl with the CUDA device (sm_90 by default, CUDAARCHS overrides), its
#              GoogleTest suites and xccl-tests, in ./build-gpu
#   plugin     the torch extensions against this machine's torch (editable install)
#   smoke      one small allreduce conformance on the GPU, 2 processes, 10 s timeout: when the
#              data path hangs (as it first did on an H200), conform, pytest and bench are
#              skipped instead of each spending minutes on their timeouts
#   ctest      the CUDA GoogleTest suites (CudaDevice.*, CudaColl.*)
#   diag       where a large all_reduce's time goes: xccl-tests -D cuda at 64 MiB over lanes and
#              over host staging, with XCCL_CUDA_STATS=1 (time per kind of device operation)
#              and the transport lines of XCCL_DEBUG=INFO, beside -D host
#   probe      scripts/cuda_pg_probe.py: the backend on CUDA tensors, 2 ranks, step by step,
#              under a few environments (lazy vs eager module loading, hold kinds, staging);
#              native stacks of a hung rank. When its default variant fails, pytest and bench
#              are skipped (they would each spend their timeout)
#   conform    xccl-tests --conformance -D cuda: 2 and 3 processes, and 2 threads, on the GPU(s)
#   bench      bench/bench_cuda.py: busbw vs the GPU's D2D copy, vs gloo and vs NCCL in the same
#              run, 8 B latency
#   pytest     tests/python/test_cuda.py, one pytest per test (quickest first)
#   cpu        the CPU scaling runs this machine's cores allow: xccl-tests all_reduce and
#              bench_torch (xccl vs gloo, and Open MPI when mpirun is there) at 4, 8, 16 ranks
#              (XCCL_GPU_CHECK_RANKS, XCCL_GPU_CHECK_CPU_MAX: the CI sample runs 2 ranks, 64K)
# --quick runs info, deps, core, smoke, conform (well under 4 minutes on 16 cores).
#
# Results go under $OUT (default ./gpu_check_out): gpu_check.log (every step's output, in
# order), summary.json (each step's status, seconds and parsed figures, bench JSONs inlined)
# and logs.tar.gz (one log per step). Three files, so it fits a transfer of few files.
# Exit status: 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu_check_out}
DEPS=${XCCL_GPU_DEPS:-$ROOT/.gpu_deps}
BUILD=${XCCL_GPU_BUILD:-$ROOT/build-gpu}
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
export CUDAARCHS=${CUDAARCHS:-90}
CPU_RANKS=${XCCL_GPU_CHECK_RANKS:-4 8 16}   # the cpu step's world sizes
CPU_MAX=${XCCL_GPU_CHECK_CPU_MAX:-64M}      # and its largest message
ALL_STEPS="info deps core plugin smoke ctest diag probe conform bench pytest cpu"
QUICK_STEPS="info deps core smoke diag conform"
steps=$ALL_STEPS
dry=0
skip=""
BUDGET=0   # seconds for the whole run (0: none); steps are cut short to leave the summary time
usage() { sed -n '2,30p' "$0"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) steps=$QUICK_STEPS ;;
    --dry-run) dry=1 ;;
    --budget) BUDGET=$2; shift ;;
    --only) steps=${2//,/ }; shift ;;
    --skip) skip=${2//,/ }; shift ;;
    -h|--help) usage 0 ;;
    *) echo "gpu_check: unknown argument '$1'" >&2; usage 2 ;;
  esac
  shift
done
for s in $steps $skip; do
  case " $ALL_STEPS " in *" $s "*) ;; *) echo "gpu_check: unknown step '$s' (steps: $ALL_STEPS)" >&2; exit 2 ;; esac
done

mkdir -p "$OUT/logs"
LOG=$OUT/gpu_check.log
RESULTS=$OUT/logs/results.tsv   # step<TAB>status<TAB>seconds<TAB>reason
[ "$dry" = 1 ] || { : >"$LOG"; : >"$RESULTS"; }
failed_builds=""

say() { echo "== gpu_check: $*" | tee -a "$LOG"; }

# run_step NAME TIMEOUT_S COMMAND... : runs COMMAND with a hard timeout, its output to the
# step's log and to gpu_check.log, and records pass/fail/timeout with the time taken.
run_step() {
  local name=$1 limit=$2; shift 2
  if [ "$dry" = 1 ]; then
    printf '%-8s (timeout %4ss)\n' "$name" "$limit"
    declare -f "$1" | sed '1,2d;$d' | grep -v '^ *local ' | sed 's/^ */    /'
    return 0
  fi
  local t0=$SECONDS rc
  if [ "$BUDGET" -gt 0 ]; then  # never start or run past the budget: the summary must be written
    local left=$((BUDGET - (SECONDS - T0) - 20))
    if [ "$left" -lt 15 ]; then skip_step "$name" "out of the --budget of $BUDGET s"; return 1; fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  say "$name: start (timeout ${limit} s): $*"
  timeout -k 10 "$limit" bash -c "$*" >"$OUT/logs/$name.log" 2>&1
  rc=$?
  cat "$OUT/logs/$name.log" >>"$LOG"
  local dt=$((SECONDS - t0)) status=pass
  [ $rc -ne 0 ] && status=fail
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && status=timeout
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$dt" "exit $rc" >>"$RESULTS"
  say "$name: $status in ${dt} s (exit $rc)"
  tail -n 25 "$OUT/logs/$name.log" | sed "s/^/  [$name] /"
  return $rc
}

skip_step() {  # NAME REASON
  [ "$dry" = 1 ] && { printf '%-8s skipped: %s\n' "$1" "$2"; return; }
  printf '%s\tskipped\t0\t%s\n' "$1" "$2" >>"$RESULTS"
  say "$1: skipped ($2)"
}

wanted() { case " $steps " in *" $1 "*) case " $skip " in *" $1 "*) return 1 ;; esac; return 0 ;; esac; return 1; }

needs() {  # STEP BUILD...: skip STEP when a build it needs failed
  local s=$1; shift
  for b in "$@"; do
    case " $failed_builds " in *" $b "*) skip_step "$s" "the $b step failed"; return 1 ;; esac
  done
  return 0
}

# ---------------------------------------------------------------------------------------
step_info() {
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(uname -a)"; echo "cores: $(nproc)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | wc -l) changed files"
  nvidia-smi || echo "nvidia-smi: not available"
  nvcc --version || echo "nvcc: not available"
  cmake --version | head -1
  $PY - <<'EOF'
import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)
print("cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, "sm", f"{p.major}.{p.minor}", "mem GiB", round(p.total_memory / 2**30, 1),
          "SMs", p.multi_processor_count)
    try:
        print("nccl", torch.cuda.nccl.version())
    except Exception as e:
        print("nccl: unavailable", e)
EOF
  command -v mpirun && mpirun --version | head -1 || echo "mpirun: not available"
}

# GoogleTest: the system's when CMake finds it, else built from the carried sources.
gtest_prefix=""
step_deps() {
  local probe; probe=$(mktemp -d)
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(p CXX)\nfind_package(GTest REQUIRED)\n' >"$probe/CMakeLists.txt"
  if cmake -S "$probe" -B "$probe/b" >/dev/null 2>&1; then
    echo "GoogleTest: found on the system"; rm -rf "$probe"; return 0
  fi
  rm -rf "$probe"
  local src; src=$(ls -d "$DEPS"/usr/src/googletest 2>/dev/null || true)
  if [ -z "$src" ]; then
    echo "GoogleTest: not on this machine and no sources in $DEPS (run scripts/gpu_deps.sh where apt works, then carry .gpu_deps)"
    return 1
  fi
  cmake -S "$src" -B "$BUILD-gtest" -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX="$BUILD-gtest/prefix" >/dev/null &&
    cmake --build "$BUILD-gtest" -j"$JOBS" >/dev/null && cmake --install "$BUILD-gtest" >/dev/null &&
    echo "GoogleTest: built from $src into $BUILD-gtest/prefix"
}

step_core() {
  local prefix=""
  [ -d "$BUILD-gtest/prefix" ] && prefix="$BUILD-gtest/prefix"
  [ -d "$DEPS/usr/include/CLI" ] && prefix="${prefix:+$prefix;}$DEPS/usr"
  local gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DXCCL_WITH_CUDA=ON \
    -DXCCL_BUILD_FUZZ=OFF -DXCCL_BUILD_BENCH=ON ${prefix:+"-DCMAKE_PREFIX_PATH=$prefix"} &&
    cmake --build "$BUILD" -j"$JOBS"
}

step_plugin() {
  # Editable install against this machine's torch; no index, no dependencies fetched. The
  # core libraries are the ones the core step built (XCCL_CORE_BUILD): built once.
  XCCL_CORE_BUILD=$BUILD MAX_JOBS=$JOBS $PY -m pip install --no-build-isolation --no-deps --no-index -v -e . 2>&1 |
    grep -v '^  *copying\|^ *adding' | tee "$OUT/logs/plugin_full.log" | tail -n 60
  local rc=${PIPESTATUS[0]}
  # the first compiler errors, which the tail above does not reach
  [ "$rc" -eq 0 ] || grep -m 12 -B 3 ' error: ' "$OUT/logs/plugin_full.log"
  [ "$rc" -eq 0 ] || return "$rc"
  cd /tmp && $PY -c "import torch, torch_xccl, torch.distributed as d; print('torch_xccl', torch_xccl.__file__, 'xccl', torch_xccl.xccl_version(), 'torch', torch.__version__)"
}

step_smoke() {
  timeout -k 5 40 "$BUILD/tools/xccl-tests/xccl-tests" --conformance -D cuda -p 2 -C all_reduce \
    -d float -T 10
}

step_ctest() { ctest --test-dir "$BUILD" -R 'Cuda' --output-on-failure --timeout 240; }

step_conform() {
  local t=$BUILD/tools/xccl-tests/xccl-tests rc=0
  for args in "-p 2" "-p 3" "-t 2"; do
    echo "--- xccl-tests --conformance -D cuda $args"
    # shellcheck disable=SC2086
    timeout -k 5 100 "$t" --conformance -D cuda $args -T 30 || rc=1
  done
  echo "--- xccl-tests all_reduce -D cuda -p 2 (performance, checked)"
  timeout -k 5 120 "$t" all_reduce -D cuda -p 2 -b 8 -e 256M -f 8 -n 20 -w 3 -c 1 \
    -J "$OUT/logs/xccl_tests_cuda_p2.json" || rc=1
  echo "--- xccl-tests all_reduce -D cuda -t 2 (ranks as threads: one context, no time slicing)"
  timeout -k 5 60 "$t" all_reduce -D cuda -t 2 -b 8 -e 64M -f 8 -n 10 -w 2 -c 1 \
    -J "$OUT/logs/xccl_tests_cuda_t2.json" || rc=1
  return $rc
}

step_diag() {
  # Two processes on one GPU are two CUDA contexts, which the GPU time-slices (no MPS); two
  # threads share one context. If "-t 2" is fast where "-p 2" is slow, time-slicing is why.
  local t=$BUILD/tools/xccl-tests/xccl-tests
  for v in "host|-p 2|" "cuda|-p 2|" "cuda|-t 2|" "cuda|-p 2|XCCL_SHM_LANE=0" "cuda|-p 2|XCCL_CUDA_HOLD=kernel"; do
    IFS='|' read -r dev launch env <<<"$v"
    echo "--- xccl-tests all_reduce -D $dev $launch at 64 MiB ${env:-(defaults)}"
    # shellcheck disable=SC2086
    env $env XCCL_CUDA_STATS=1 XCCL_DEBUG=INFO XCCL_DEBUG_SUBSYS=INIT,SHM,NET \
      timeout -k 5 60 "$t" all_reduce -D "$dev" $launch -b 8 -e 64M -f 8192 -n 5 -w 1 -c 1 2>&1 |
      grep -v '^#  *Rank\|^# *$' | tail -n 40
  done
}

step_probe() {  # XCCL_GPU_PROBE_VARIANTS: the probe's --variants (its default list otherwise)
  $PY scripts/cuda_pg_probe.py --timeout 25 --out "$OUT/logs" \
    ${XCCL_GPU_PROBE_VARIANTS:+--variants "$XCCL_GPU_PROBE_VARIANTS"}
}
probe_default_passed() {
  $PY -c 'import json, sys; r = json.load(open(sys.argv[1]))
sys.exit(0 if any(v["variant"] == "default" and v["passed"] for v in r) else 1)' \
    "$OUT/logs/cuda_pg_probe.json" 2>/dev/null
}

# One pytest per test, quickest first, so that a step cut short by the budget still has every
# finished test's outcome and traceback in its log (a single -q run printed only "FF").
step_pytest() {
  local rc=0 t
  for t in bad_cuda_input one_rank_nccl ddp_on_cuda sync_batchnorm fsdp2 collective_matrix; do
    echo "== pytest -k $t"
    $PY -m pytest tests/python/test_cuda.py -k "$t" -q -rs --tb=short -p no:cacheprovider \
      --durations=3 || rc=1
  done
  return $rc
}

step_bench() {
  # 64 MiB and 16 MiB: at the 0.24 GB/s measured so far a 1 GiB size alone would spend the
  # step's budget; the comparison with NCCL and the D2D copy is what is wanted first.
  $PY bench/bench_cuda.py --world-size 2 --max-bytes 64M --json "$OUT/logs/bench_cuda_2.json" &&
    $PY bench/bench_cuda.py --world-size 3 --max-bytes 16M --json "$OUT/logs/bench_cuda_3.json"
}

step_cpu() {
  local t=$BUILD/tools/xccl-tests/xccl-tests rc=0 n
  for n in $CPU_RANKS; do
    echo "--- xccl-tests all_reduce -p $n (host memory)"
    timeout -k 5 120 "$t" all_reduce -p "$n" -b 8 -e "$CPU_MAX" -f 64 -n 10 -w 2 -c 1 \
      -J "$OUT/logs/xccl_tests_cpu_p$n.json" || rc=1
  done
  echo "--- bench_torch: xccl vs gloo, allreduce, $CPU_RANKS ranks"
  # shellcheck disable=SC2086
  $PY bench/bench_torch.py --world-sizes $CPU_RANKS --collectives allreduce --min-bytes 8 \
    --max-bytes "$CPU_MAX" --factor 64 --rounds 3 --quiet --name gpu_check_cpu \
    --json "$OUT/logs/bench_torch_cpu.json" || rc=1
  if command -v mpirun >/dev/null && $PY -c "import mpi4py" 2>/dev/null; then
    for n in $CPU_RANKS; do  # the peers' table (gloo, xccl, Open MPI; DeepSpeed where installed)
      echo "--- bench_peers.py -n $n (Open MPI through mpi4py)"
      timeout -k 5 300 $PY bench/bench_peers.py -n "$n" --max-bytes 16M --rounds 3 --no-plot \
        --quiet --json "$OUT/logs/peers_p$n.json" || echo "bench_peers at $n ranks failed (not counted)"
    done
  else
    echo "Open MPI: mpirun or mpi4py not on this machine, not compared"
  fi
  return $rc
}

# ---------------------------------------------------------------------------------------
T0=$SECONDS
export ROOT OUT DEPS BUILD PY JOBS CUDAARCHS CPU_RANKS CPU_MAX
export -f step_info step_deps step_core step_plugin step_smoke step_ctest step_diag step_probe \
  step_conform step_pytest step_bench step_cpu
[ "$dry" = 1 ] && echo "gpu_check: steps: $steps${skip:+ (skipping $skip)}; OUT=$OUT; build in $BUILD; CUDAARCHS=$CUDAARCHS"
plugin_pid=""
# The plugin (torch extensions, CPU-bound) builds in the background while the GPU-bound
# ctest and conformance steps run; the steps that need it wait for it.
wait_plugin() {
  [ -n "$plugin_pid" ] || return 0
  wait "$plugin_pid" || failed_builds+=" plugin"
  plugin_pid=""
}
for s in $ALL_STEPS; do
  wanted "$s" || continue
  case $s in
    info) run_step info 60 step_info ;;
    deps) run_step deps 240 step_deps || failed_builds+=" deps" ;;
    core) needs core deps && { run_step core 420 step_core || failed_builds+=" core"; } ;;
    plugin)
      if needs plugin core; then
        if [ "$dry" = 1 ]; then run_step plugin 420 step_plugin
        else run_step plugin 420 step_plugin & plugin_pid=$!; fi
      else failed_builds+=" plugin"; fi ;;
    smoke) needs smoke core && { run_step smoke 60 step_smoke || failed_builds+=" smoke"; } ;;
    ctest) needs ctest deps core && run_step ctest 300 step_ctest ;;
    diag) needs diag core smoke && run_step diag 200 step_diag ;;
    probe) wait_plugin
      # pytest and bench are gated on the default variant only (the others are diagnoses)
      needs probe plugin smoke && { run_step probe 200 step_probe || probe_default_passed ||
        failed_builds+=" probe"; } ;;
    conform) needs conform core smoke && run_step conform 300 step_conform ;;
    pytest) wait_plugin; needs pytest plugin smoke probe && run_step pytest 600 step_pytest ;;
    bench) wait_plugin; needs bench plugin smoke probe && run_step bench 300 step_bench ;;
    cpu) wait_plugin; needs cpu core plugin && run_step cpu 300 step_cpu ;;
  esac
done
wait_plugin
[ "$dry" = 1 ] && exit 0

status=0
grep -qP '\t(fail|timeout)\t' "$RESULTS" && status=1
$PY "$ROOT/scripts/gpu_check_summary.py" "$OUT" --seconds $((SECONDS - T0)) | tee -a "$LOG"
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
say "done in $((SECONDS - T0)) s, exit $status"
exit $status
