#!/usr/bin/env bash
# Runs every test: set-up (idempotent), the core's GoogleTest suites and xccl-tests
# conformance runs (ctest), then the plugin's multi-process pytest suite. Every
# multi-process test carries a hard timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
status=0
ctest --test-dir build --output-on-failure --timeout 300 || status=1
${PYTHON:-python3} -m pytest tests/python -q -rs --timeout=600 || status=1
exit $status
