"""The end of every training job, repeated: collectives, barrier, destroy, exit at once.

    python bench/exit_soak.py --runs 400                # real processes, 2 ranks per run
    python bench/exit_soak.py --runs 200 --ranks 3 --tcp

Each run starts fresh processes (spawn), which run `--iters` allreduces, `dist.barrier()`,
`dist.destroy_process_group()` and exit immediately; a run fails when any rank raises,
exits non-zero or outlives `--timeout`. The peer that leaves first has consumed everything
it needed, so no survivor may fail (a closed link counts as an error only when something
is still owed across it). Prints the failure count and every failure's first lines; exits
non-zero on any failure.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
util.use_test_helpers()

import workers_reliability  # noqa: E402
from harness import WorldFailed, run_world  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--numel", type=int, default=256)
    ap.add_argument("--tcp", action="store_true", help="XCCL_SHM_DISABLE=1 (sockets)")
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    if args.tcp:
        os.environ["XCCL_SHM_DISABLE"] = "1"
    failures = []
    t0 = time.monotonic()
    for run in range(args.runs):
        try:
            results = run_world(workers_reliability.exit_after_barrier, args.ranks,
                                timeout=args.timeout, iters=args.iters, numel=args.numel)
            if not all(r["ok"] for r in results):
                failures.append((run, f"wrong allreduce result: {results}"))
        except WorldFailed as e:
            failures.append((run, str(e)))
        if (run + 1) % 50 == 0:
            print(f"  {run + 1} runs, {len(failures)} failures, "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    transport = "TCP" if args.tcp else "SHM"
    print(f"exit soak: {args.runs} runs x {args.ranks} ranks ({transport}, {args.iters} "
          f"allreduces, barrier, destroy, exit): {len(failures)} failures")
    for run, msg in failures[:10]:
        print(f"  run {run}: " + "\n    ".join(msg.splitlines()[:6]))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
