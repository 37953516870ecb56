#!/usr/bin/env bash
# Runs a command and checks what it printed (for CTest entries that must see a log line):
#
#   expect_output.sh PATTERN... -- COMMAND [ARGS...]
#
# Each PATTERN is an extended regular expression that the command's combined stdout and
# stderr must match; !PATTERN must not match. Fails (exit 1) when the command fails or a
# pattern disagrees, and prints the output either way.
set -uo pipefail
patterns=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do patterns+=("$1"); shift; done
[ "${1:-}" = "--" ] || { echo "usage: $0 PATTERN... -- COMMAND [ARGS...]" >&2; exit 2; }
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
status=0
if [ $rc -ne 0 ]; then echo "expect_output: the command exited with $rc" >&2; status=1; fi
for p in "${patterns[@]}"; do
  if [ "${p:0:1}" = "!" ]; then
    if grep -Eq -- "${p:1}" <<<"$out"; then echo "expect_output: unexpected match: ${p:1}" >&2; status=1; fi
  elif ! grep -Eq -- "$p" <<<"$out"; then
    echo "expect_output: no match: $p" >&2; status=1
  fi
done
exit $status
