#!/usr/bin/env bash
# Long fuzzing runs with libFuzzer (clang; apt install clang): every target of tests/fuzz,
# built with -fsanitize=fuzzer,address,undefined in ./build-fuzz (the core too), started from its seeds,
# RUNS inputs each (default 1,000,000). A crash, sanitizer report, leak or timeout stops the
# target and leaves the input as build-fuzz/crash-*; the summary line per target says how
# many inputs ran. CI runs a short sample of the same targets without libFuzzer (ctest -R fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-1000000}
TARGETS=${TARGETS:-"peer_info topo_file tcp_handshake store_request frames secret_record"}
command -v clang++ >/dev/null || { echo "fuzz.sh: needs clang (apt install clang)"; exit 2; }
# The whole core instrumented (ASan + UBSan, and libFuzzer's coverage), not only the targets.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DXCCL_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DXCCL_WITH_CUDA=OFF -DXCCL_BUILD_TOOLS=OFF -DXCCL_BUILD_BENCH=OFF -DXCCL_BUILD_TOPO_TOOL=OFF \
  >/dev/null
for t in $TARGETS; do
  cmake --build build-fuzz -j"$(nproc)" --target "fuzz_${t}" "fuzz_${t}_libfuzzer" >/dev/null
done
cd build-fuzz
for t in $TARGETS; do
  corpus=corpus/$t
  mkdir -p "$corpus"
  ./tests/fuzz/fuzz_"$t" --dump-seeds "$corpus" >/dev/null
  start=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1 ./tests/fuzz/fuzz_"${t}"_libfuzzer -runs="$RUNS" -max_len=4096 \
    -timeout=10 -print_final_stats=1 "$corpus" 2> "fuzz_${t}.log" || {
      echo "fuzz $t: FAILED (build-fuzz/fuzz_${t}.log)"; tail -30 "fuzz_${t}.log"; exit 1; }
  execs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "fuzz_${t}.log" | grep -o "[0-9]*$")
  cov=$(grep -o "cov: [0-9]*" "fuzz_${t}.log" | tail -1)
  echo "fuzz $t: $execs inputs, no crash, $cov, $(( $(date +%s) - start )) s"
done
