"""destroy_process_group() + init_process_group("xccl"), over and over in the same processes.

    python bench/reinit_soak.py                                  # 100 cycles, 2-4 ranks, cpu and xdev
    python bench/reinit_soak.py --cycles 100 --ranks 3 --device xdev --mode store

Each cycle (tests/python/workers_restart.py): init_process_group (tcp:// init_method, where
torch re-uses the port's store server in rank 0's process, or one TCPStore kept and passed
every time), allreduce and broadcast checked on the cycle's device (and a max on cpu for
xdev), a monitored barrier that rank 0 reaches 0.1 s late (a stale release key would let the
others through early), a two-rank subgroup every fifth cycle (3+ ranks), then
destroy_process_group. xdev cycles alternate eager (device_id) and lazy device communicators.
Prints the cycles completed per configuration; exits non-zero unless every one completed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
util.use_test_helpers()

import workers_restart  # noqa: E402
from harness import WorldFailed, run_world  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--device", nargs="+", default=["cpu", "xdev"], choices=["cpu", "xdev"])
    ap.add_argument("--mode", nargs="+", default=["tcp", "store"], choices=["tcp", "store"])
    ap.add_argument("--timeout", type=float, default=30.0, help="group timeout, seconds")
    args = ap.parse_args()
    total_ok = total = 0
    failed = []
    for world in args.ranks:
        for device in args.device:
            for mode in args.mode:
                t0 = time.monotonic()
                try:
                    res = run_world(workers_restart.reinit_cycles, world, init=False,
                                    timeout=60 + args.cycles * 3, port=util.free_port(),
                                    cycles=args.cycles, device=device, mode=mode,
                                    timeout_s=args.timeout)
                    ok = min(r["ok"] for r in res)
                    errors = [f"rank {i}: {r['error']}" for i, r in enumerate(res) if r["error"]]
                except WorldFailed as e:
                    ok, errors = 0, [str(e)]
                dt = time.monotonic() - t0
                total_ok += ok
                total += args.cycles
                print(f"ranks {world} device {device:4s} mode {mode:5s}: {ok}/{args.cycles} "
                      f"cycles ok ({dt:.1f} s in all)", flush=True)
                if errors:
                    failed.append((world, device, mode))
                    print("  " + errors[0][:2000].replace("\n", "\n  "), flush=True)
    print(f"total: {total_ok}/{total} destroy-and-init cycles ok", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
