#!/usr/bin/env python3
"""Where does the torch backend stop on CUDA tensors? A diagnostic for a GPU machine.

On 2026-11-26 (H100, torch 2.11.0+cu130) libxccl's own CUDA conformance passed while the
backend's first all_reduce on CUDA tensors timed out: rank 0 had sent, rank 1 never had. This
probe runs two ranks on cuda:0 through a few small steps, one variant of the environment at a
time, each under a hard timeout, and reports the last step each rank reached. A hung rank's
native stacks are dumped with gdb (or cuda-gdb) when the machine has one.

  python3 scripts/cuda_pg_probe.py [--variants default,eager,...] [--timeout 25] [--out DIR]

Variants: default (collectives staged through pinned host memory, XCCL_CUDA_STAGING=1); eager
(CUDA_MODULE_LOADING=EAGER); kernel (XCCL_CUDA_HOLD=kernel); direct and direct_eager
(XCCL_CUDA_STAGING=0: the steps as CUDA calls of the progress thread, as before 2026-11-27's
fourth GPU run); exec and exec_eager (XCCL_CUDA_HOLD=exec: the executor kernel); hostrings
(direct, with payloads through host rings instead of CUDA IPC lanes, XCCL_SHM_LANE=0); warm
(every torch kernel the steps use runs once before the first collective). Default list:
default, eager, direct_eager. On 2026-11-27 (H100, before staging) both ranks hung in step 3
(torch's jiterator compiles and loads a module there) under eager, warm, kernel and host rings
with the direct steps, and under eager, warm and host rings with the executor; default passed.
Steps per rank: sync all_reduce, async all_reduce + future, an all_reduce with a kernel never
launched before queued behind it, then a 64 MiB all_reduce timed five times (GB/s).
Exit status 0 when every variant passed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402

VARIANTS = {
    "default": {},
    "eager": {"CUDA_MODULE_LOADING": "EAGER"},
    "kernel": {"XCCL_CUDA_HOLD": "kernel"},
    "direct": {"XCCL_CUDA_STAGING": "0"},
    "direct_eager": {"XCCL_CUDA_STAGING": "0", "CUDA_MODULE_LOADING": "EAGER"},
    "exec": {"XCCL_CUDA_HOLD": "exec"},
    "exec_eager": {"XCCL_CUDA_HOLD": "exec", "CUDA_MODULE_LOADING": "EAGER"},
    "hostrings": {"XCCL_CUDA_STAGING": "0", "XCCL_SHM_LANE": "0"},
    "warm": {"PROBE_WARM": "1"},
}


def log(rank: int, what: str) -> None:
    print(f"probe rank {rank} {time.monotonic():.3f}: {what}", file=sys.stderr, flush=True)


def rank_main(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    import torch_xccl  # noqa: F401  (routes "xccl")

    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    if os.environ.get("PROBE_WARM") == "1":
        x = torch.ones(37, device=dev)
        (x * 2).sum().item()
        torch.special.erfcx(x)
        torch.equal(x, x)
        torch.cuda.synchronize()
        log(rank, "warmed the torch kernels")
    dist.init_process_group("xccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=20))
    log(rank, "step 1: sync all_reduce of 37 floats")
    t = torch.full((37,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    log(rank, "step 1: enqueued; synchronizing")
    torch.cuda.synchronize()
    ok1 = bool((t == world * (world + 1) / 2).all().item())
    log(rank, f"step 1: done, correct={ok1}")

    log(rank, "step 2: async all_reduce + get_future().wait()")
    t = torch.full((37,), float(rank + 1), device=dev)
    w = dist.all_reduce(t, async_op=True)
    w.get_future().wait()
    w.wait()
    torch.cuda.synchronize()
    log(rank, f"step 2: done, correct={bool((t == world * (world + 1) / 2).all().item())}")

    log(rank, "step 3: async all_reduce, then a kernel never launched before")
    t = torch.full((37,), float(rank + 1), device=dev)
    w = dist.all_reduce(t, async_op=True)
    y = torch.special.i1e(torch.ones(5, device=dev))
    log(rank, "step 3: the new kernel was queued")
    w.wait()
    torch.cuda.synchronize()
    log(rank, f"step 3: done ({float(y.sum()):.3f})")

    n = 16 << 20  # 64 MiB of float32
    big = torch.ones(n, device=dev)
    dist.all_reduce(big)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        dist.all_reduce(big)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / 5
    log(rank, f"step 4: 64 MiB all_reduce {dt * 1e3:.2f} ms, algbw {n * 4 / dt / 1e9:.2f} GB/s")
    dist.destroy_process_group()
    log(rank, "finished")


def stacks(pid: int) -> str:
    """Where each thread of a hung rank is: its kernel wait channel and syscall from /proc
    (always there), then native stacks from gdb (or cuda-gdb) when the machine has one. gdb
    must pass SIGSEGV on: the CUDA driver raises it in its own threads, and a gdb that stops
    there prints nothing else (the 2026-11-27 runs)."""
    out = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        base = f"/proc/{pid}/task/{tid}"
        try:
            comm = open(f"{base}/comm").read().strip()
            wchan = open(f"{base}/wchan").read().strip()
            state = open(f"{base}/stat").read().split(") ")[1].split()[0]
            sysc = open(f"{base}/syscall").read().split()[0]
        except OSError:
            continue
        out.append(f"tid {tid} {comm} state {state} wchan {wchan} syscall {sysc}")
    # Plain gdb first: cuda-gdb attaching to a live CUDA process stopped on the driver's
    # SIGSEGV and printed no frame on 2026-11-27, whatever `handle` said.
    gdb = shutil.which("gdb") or shutil.which("cuda-gdb")
    if not gdb:
        return "\n".join(out + ["(no gdb on this machine)"])
    try:
        r = subprocess.run([gdb, "-nx", "-batch", "-ex", "set pagination off",
                            "-ex", "handle SIGSEGV SIGBUS SIGUSR1 SIGUSR2 nostop noprint pass",
                            "-ex", f"attach {pid}", "-ex", "thread apply all bt 25",
                            "-ex", "detach"],
                           capture_output=True, text=True, timeout=40)
        frames = [ln for ln in r.stdout.splitlines() if ln.startswith(("#", "Thread"))][:300]
        out += frames or [f"({os.path.basename(gdb)} printed no frame; its last lines:)"] + (
            r.stdout + r.stderr).splitlines()[-8:]
    except subprocess.TimeoutExpired:
        out.append("(gdb timed out)")
    return "\n".join(out)


def run_variant(name: str, timeout: float, out: str) -> dict:
    port = util.free_port()
    env = dict(os.environ, **VARIANTS[name])
    env.setdefault("XCCL_DEBUG", "INFO")
    env.setdefault("XCCL_CUDA_STATS", "1")
    procs, logs = [], []
    for r in range(2):
        path = os.path.join(out, f"probe_{name}_rank{r}.log")
        f = open(path, "w")
        logs.append(path)
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--port",
                                       str(port)], env=env, stdout=f, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    hung = [r for r, p in enumerate(procs) if p.poll() is None]
    result = {"variant": name, "env": VARIANTS[name], "hung": hung,
              "exit": [p.poll() for p in procs]}
    for r in hung:
        result[f"stacks_rank{r}"] = stacks(procs[r].pid)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    for r, path in enumerate(logs):
        lines = open(path, errors="replace").read().splitlines()
        result[f"last_rank{r}"] = [ln for ln in lines if ln.startswith("probe ")][-1:]
        result[f"tail_rank{r}"] = lines[-12:]
        result[f"stats_rank{r}"] = [ln for ln in lines if "stats (pid" in ln]
    result["passed"] = not hung and all(p.returncode == 0 for p in procs)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="default,eager,direct_eager")
    ap.add_argument("--timeout", type=float, default=25.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank is not None:
        rank_main(a.rank, 2, a.port)
        return 0
    os.makedirs(a.out, exist_ok=True)
    results = []
    for name in a.variants.split(","):
        if name not in VARIANTS:
            ap.error(f"unknown variant {name!r} (known: {', '.join(VARIANTS)})")
        r = run_variant(name, a.timeout, a.out)
        results.append(r)
        print(f"{name:8s} {'pass' if r['passed'] else 'FAIL'} hung={r['hung']} exit={r['exit']} "
              f"last={r['last_rank0'] + r['last_rank1']}", flush=True)
        for k in ("stats_rank0", "stats_rank1"):
            for ln in r[k]:
                print("   ", ln)
    with open(os.path.join(a.out, "cuda_pg_probe.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
