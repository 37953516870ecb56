"""torchrun --max-restarts 1 with a worker that fails, over and over: does the job restart,
resume and end right?

    python scripts/restart_sweep.py --runs 13                 # 13 runs per xccl cell, 3 per gloo cell
    python scripts/restart_sweep.py --runs 2 --backends xccl --rdzv c10d --devices xdev

Cells: backend (xccl; gloo on cpu for comparison) x rendezvous (static: --master-addr/port,
torchrun's default; c10d: --rdzv-backend c10d) x device (cpu, xdev) x fault (exit: the worker
leaves with status 3; kill: it SIGKILLs itself). Each run starts
examples/elastic_restart/train.py under a fresh torchrun with 2, 3 or 4 ranks (in turn) and
ELASTIC_FAIL_AT=<random rank>:<random step>:<fault>, so the first attempt loses a worker and
torchrun restarts the group once. A run succeeds when torchrun exits 0, the restarted attempt
(TORCHELASTIC_RESTART_COUNT=1) finished on every rank, and every rank's final parameters are
bitwise equal to those of an uninterrupted run of the same world size, device and backend
(one reference run each, made first). Anything else, or a run past --timeout (the launcher
and its workers are killed), is a failure; the first lines of each failure's output are
printed. Prints successes per cell; exits non-zero on any xccl failure (gloo's are reported,
not judged).
"""
from __future__ import annotations

import argparse
import collections
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402

TRAIN = os.path.join(util.REPO, "examples", "elastic_restart", "train.py")


def torchrun(world, rdzv, device, backend, ckpt, steps, fail=None, timeout=180.0, run_id="job"):
    """(returncode or None on timeout, output) of one torchrun job."""
    port = util.free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc-per-node", str(world), "--max-restarts", "1" if fail else "0",
           "--monitor-interval", "0.1"]
    if rdzv == "static":
        cmd += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
    else:
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-id", run_id]
    cmd += [TRAIN, "--ckpt-dir", ckpt, "--device", device, "--backend", backend,
            "--steps", str(steps), "--timeout", "60"]
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_XCCL_TRACE_DIR=os.path.join(ckpt, "trace"))
    env.pop("ELASTIC_FAIL_AT", None)
    if fail:
        env["ELASTIC_FAIL_AT"] = fail
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the launcher and every worker
        out, _ = p.communicate()
        return None, out


def final_params(ckpt, world):
    import torch

    return [torch.load(os.path.join(ckpt, f"final_rank{r}.pt")) for r in range(world)]


def same(a, b):
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def judge(rc, out, ckpt, world, reference, restarted):
    """"" when the run is right, else why not."""
    if rc is None:
        return "timed out (killed)"
    if rc != 0:
        return f"torchrun exited with {rc}"
    attempt = 1 if restarted else 0
    done = set(re.findall(rf"\[attempt {attempt}\] rank (\d+) done", out))
    if done != {str(r) for r in range(world)}:
        return f"attempt {attempt} finished on ranks {sorted(done)} of {world}"
    try:
        params = final_params(ckpt, world)
    except Exception as e:  # noqa: BLE001
        return f"final parameters missing: {e}"
    for r in range(1, world):
        if not same(params[0], params[r]):
            return f"rank {r}'s final parameters differ from rank 0's"
    if reference is not None and not same(params[0], reference):
        return "final parameters differ from the uninterrupted run's"
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=13, help="runs per xccl cell")
    ap.add_argument("--gloo-runs", type=int, default=3, help="runs per gloo cell")
    ap.add_argument("--backends", nargs="+", default=["xccl", "gloo"])
    ap.add_argument("--rdzv", nargs="+", default=["static", "c10d"])
    ap.add_argument("--devices", nargs="+", default=["cpu", "xdev"])
    ap.add_argument("--faults", nargs="+", default=["exit", "kill"])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per torchrun job")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    cells = [(b, z, d, f) for b in args.backends for z in args.rdzv for d in args.devices
             for f in args.faults if not (b == "gloo" and d != "cpu")]  # gloo has no xdev
    references = {}
    results = collections.OrderedDict((c, [0, 0]) for c in cells)
    failures = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="restart_sweep_") as tmp:
        for (backend, rdzv, device, fault) in cells:
            n = args.runs if backend == "xccl" else args.gloo_runs
            for i in range(n):
                world = args.ranks[i % len(args.ranks)]
                key = (backend, device, world)
                if key not in references:  # the uninterrupted run to compare with
                    ckpt = tempfile.mkdtemp(dir=tmp)
                    rc, out = torchrun(world, "static", device, backend, ckpt, args.steps,
                                       timeout=args.timeout)
                    why = judge(rc, out, ckpt, world, None, restarted=False)
                    if why:
                        print(f"reference run {key} failed: {why}\n{out[-3000:]}", flush=True)
                        references[key] = None
                    else:
                        references[key] = final_params(ckpt, world)[0]
                fail = f"{rng.randrange(world)}:{rng.randrange(1, args.steps - 1)}:{fault}"
                ckpt = tempfile.mkdtemp(dir=tmp)
                start = time.monotonic()
                rc, out = torchrun(world, rdzv, device, backend, ckpt, args.steps, fail=fail,
                                   timeout=args.timeout, run_id=f"sweep{i}")
                why = ("no reference run" if references[key] is None else
                       judge(rc, out, ckpt, world, references[key], restarted=True))
                results[(backend, rdzv, device, fault)][1] += 1
                status = "ok" if not why else f"FAILED: {why}"
                if not why:
                    results[(backend, rdzv, device, fault)][0] += 1
                else:
                    failures.append((backend, rdzv, device, fault, world, fail, why, out))
                print(f"{backend:4s} {rdzv:6s} {device:4s} {fault:4s} ranks {world} "
                      f"fail {fail:9s} {time.monotonic() - start:5.1f} s  {status}", flush=True)
    print(f"\nrestart sweep, {time.monotonic() - t0:.0f} s; successes per cell "
          f"(torchrun --max-restarts 1, {args.steps} steps, ranks {args.ranks} in turn):")
    for (backend, rdzv, device, fault), (ok, n) in results.items():
        print(f"  {backend:4s}  rdzv {rdzv:6s}  {device:4s}  {fault:4s}  {ok}/{n}")
    for backend in args.backends:
        ok = sum(v[0] for c, v in results.items() if c[0] == backend)
        n = sum(v[1] for c, v in results.items() if c[0] == backend)
        print(f"  {backend} total: {ok}/{n}")
    for (backend, rdzv, device, fault, world, fail, why, out) in failures:
        lines = [ln for ln in out.splitlines() if "Error" in ln or "error" in ln][:6]
        print(f"\n{backend} {rdzv} {device} {fault} ranks {world} fail {fail}: {why}\n  "
              + "\n  ".join(ln[:400] for ln in lines))
    sys.exit(1 if any(f[0] == "xccl" for f in failures) else 0)


if __name__ == "__main__":
    main()
