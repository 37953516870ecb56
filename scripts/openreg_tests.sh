#!/usr/bin/env bash
# Fetches PyTorch's OpenReg device tests for the installed torch release into
# tests/openreg/upstream/ (git-ignored: PyTorch's files, BSD-3-Clause, run here, not vendored),
# then runs them against xdev (tests/openreg/run_openreg.py; tests/python/test_openreg_suite.py
# runs them in the regular suite once they are here). Needs git and network access.
#
#   bash scripts/openreg_tests.sh [TAG]     # default: v<installed torch version>, e.g. v2.13.0
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
tag=${1:-v$($PY -c "import torch; print(torch.__version__.split('+')[0])")}
path=test/cpp_extensions/open_registration_extension/torch_openreg/tests
dest=tests/openreg/upstream
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$tmp" init -q
git -C "$tmp" remote add origin https://github.com/pytorch/pytorch.git
git -C "$tmp" sparse-checkout set --no-cone "/$path/*.py"
git -C "$tmp" fetch -q --depth 1 --filter=blob:none origin "refs/tags/$tag"
git -C "$tmp" checkout -q FETCH_HEAD
mkdir -p "$dest"
cp "$tmp/$path"/test_*.py "$dest"/
echo "openreg_tests.sh: $(ls "$dest" | wc -l) files of PyTorch $tag in $dest"
# torch.testing._internal needs expecttest (PyTorch's test dependency); torch stays pinned
$PY -c "import expecttest" 2>/dev/null \
  || $PY -m pip install -q -c <(echo "torch==$($PY -c 'import torch; print(torch.__version__.split("+")[0])')") expecttest
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} $PY tests/openreg/run_openreg.py "$dest"
