#!/usr/bin/env bash
# Runs every test: set-up (idempotent), the core's GoogleTest suites, xccl-tests
# conformance runs and fuzz samples (ctest), the plugin's multi-process pytest suite, then the
# core suites again under ASan + UBSan (scripts/test_sanitized.sh). Every
# multi-process test carries a hard timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
status=0
ctest --test-dir build --output-on-failure --timeout 300 || status=1
${PYTHON:-python3} -m pytest tests/python -q -rs --timeout=600 || status=1
# The core suites and a fuzz sample under ASan + UBSan (XCCL_TEST_SANITIZED=0 skips it).
if [ "${XCCL_TEST_SANITIZED:-1}" != 0 ]; then
  bash scripts/test_sanitized.sh || status=1
fi
exit $status
