#!/usr/bin/env bash
# Runs every test: set-up (idempotent), lint (scripts/lint.sh), the core's GoogleTest suites,
# xccl-tests
# conformance runs and fuzz samples (ctest), the plugin's multi-process pytest suite, then the
# core suites again under ASan + UBSan (scripts/test_sanitized.sh). Every
# multi-process test carries a hard timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
phase() { echo "== test.sh: $1 done at ${SECONDS} s"; }  # where CI's time goes
bash scripts/setup.sh
phase setup
status=0
# Style, layering and clang-tidy first: clang-format, ruff, scripts/check_layers.py (seconds),
# clang-tidy on the core (scripts/tidy.py: about 4 minutes on two cores when nothing is
# cached, seconds for a tree whose files it has checked before).
bash scripts/lint.sh --tidy || status=1
phase lint
# Both suites run as many tests at once as there are cores (XCCL_TEST_JOBS): most of a test's
# time is start-up, waiting on peers and timeouts, not computing; every test still has its
# own hard timeout.
JOBS=${XCCL_TEST_JOBS:-$(nproc)}
ctest --test-dir build --output-on-failure --timeout 300 -j"$JOBS" || status=1
phase ctest
${PYTHON:-python3} -m pytest tests/python -q -rs --timeout=600 --durations=15 \
  -n "$JOBS" --dist worksteal || status=1
phase pytest
# The core suites and a fuzz sample under ASan + UBSan (XCCL_TEST_SANITIZED=0 skips it).
if [ "${XCCL_TEST_SANITIZED:-1}" != 0 ]; then
  bash scripts/test_sanitized.sh || status=1
  phase sanitized
fi
exit $status
