#!/usr/bin/env bash
# Style checks, run by scripts/test.sh (so by CI) before the suites:
#
#   bash scripts/lint.sh            # clang-format check of every tracked C/C++/CUDA file,
#                                   # ruff on every Python file (pyproject.toml's [tool.ruff]),
#                                   # the layering check (scripts/check_layers.py)
#   bash scripts/lint.sh --fix      # rewrite: clang-format -i, ruff --fix
#   bash scripts/lint.sh --tidy     # also clang-tidy (.clang-tidy) on the core's sources
#                                   # (scripts/tidy.py: build/compile_commands.json, results
#                                   # cached per file; CI runs this)
#
# Exit status 0 when everything is clean. A tool that is missing is reported and fails the
# check (scripts/setup.sh installs clang-format and ruff), so a clean result always means the
# tools ran.
set -uo pipefail
cd "$(dirname "$0")/.."
fix=0 tidy=0
for a in "$@"; do
  case "$a" in
    --fix) fix=1 ;;
    --tidy) tidy=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "lint: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
rc=0
t0=$SECONDS

# Tracked files and new ones not yet added (git add comes after lint), never ignored ones.
mapfile -t cxx < <(git ls-files --cached --others --exclude-standard | grep -E '\.(c|cc|cpp|h|hpp|cu|cuh)$')
if ! command -v clang-format >/dev/null; then
  echo "lint: clang-format not found (apt-get install clang-format)"; rc=1
elif [ "$fix" = 1 ]; then
  clang-format -i "${cxx[@]}"
else
  # One process for every file; the names come back in its warnings.
  mapfile -t bad < <(clang-format --dry-run -Werror "${cxx[@]}" 2>&1 |
                     sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' |
                     sort -u)
  if [ ${#bad[@]} -gt 0 ]; then
    echo "lint: ${#bad[@]} file(s) differ from .clang-format ($(clang-format --version | head -1)):"
    printf '  %s\n' "${bad[@]}"
    echo "  fix with: bash scripts/lint.sh --fix"
    rc=1
  else
    echo "lint: clang-format: ${#cxx[@]} files clean"
  fi
fi

if ! command -v ruff >/dev/null; then
  echo "lint: ruff not found (pip install ruff)"; rc=1
elif [ "$fix" = 1 ]; then
  ruff check --fix --quiet . || rc=1
else
  if ruff check --quiet .; then echo "lint: ruff: clean"; else rc=1; fi
fi

if python3 scripts/check_layers.py; then :; else rc=1; fi

if [ "$tidy" = 1 ]; then
  if ! command -v clang-tidy >/dev/null; then
    echo "lint: clang-tidy not found (apt-get install clang-tidy)"; rc=1
  elif python3 scripts/tidy.py; then :; else rc=1; fi
fi
echo "lint: done in $((SECONDS - t0)) s, exit $rc"
exit $rc
