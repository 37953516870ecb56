#!/usr/bin/env bash
# Runs a command and checks what it printed (for CTest entries that must see a log line):
#
#   expect_output.sh [--fails] PATTERN... -- COMMAND [ARGS...]
#
# Each PATTERN is an extended regular expression that the command's combined stdout and
# stderr must match; !PATTERN must not match. Fails (exit 1) when the command fails or a
# pattern disagrees, and prints the output either way. --fails: the command must fail instead
# (exit non-zero), for runs that are meant to be refused.
set -uo pipefail
patterns=()
want_fail=0
if [ "${1:-}" = "--fails" ]; then want_fail=1; shift; fi
while [ $# -gt 0 ] && [ "$1" != "--" ]; do patterns+=("$1"); shift; done
[ "${1:-}" = "--" ] || { echo "usage: $0 PATTERN... -- COMMAND [ARGS...]" >&2; exit 2; }
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
status=0
if [ $want_fail = 0 ] && [ $rc -ne 0 ]; then echo "expect_output: the command exited with $rc" >&2; status=1; fi
if [ $want_fail = 1 ] && [ $rc -eq 0 ]; then echo "expect_output: the command succeeded" >&2; status=1; fi
for p in "${patterns[@]}"; do
  if [ "${p:0:1}" = "!" ]; then
    if grep -Eq -- "${p:1}" <<<"$out"; then echo "expect_output: unexpected match: ${p:1}" >&2; status=1; fi
  elif ! grep -Eq -- "$p" <<<"$out"; then
    echo "expect_output: no match: $p" >&2; status=1
  fi
done
exit $status
