"""Every client run on cpu over gloo (the reference), cpu over xccl and xdev over xccl, in
float32 and bf16 mixed precision, two ranks each (torchrun), compared.

    python tests/clients/matrix.py [--clients ddp,lightning,...] [--precisions fp32,bf16]
                                   [--configs cpu-gloo,cpu-xccl,xdev-xccl] [--json FILE]

A cell passes when the run finished, both ranks ended with bit-identical parameters, they are
finite, and they are within TOLERANCE of the reference run (same client and precision, cpu
over gloo), and the client really ran where it was asked to (the cell's checks). A client
whose package is missing is reported as skipped. Exit status 0 only when no cell failed.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TOLERANCE = 1e-4
# bf16 mixed precision of a transformer: xdev autocasts with CUDA's op lists, the cpu
# reference with CPU autocast's, which keep softmax, layer_norm, gelu... in bfloat16
# (docs/XDEV_TORCH.md, "Mixed precision"); the two runs differ at bfloat16 resolution. For the
# MLP clients both lists treat every op alike and the runs agree to the bit.
TOLERANCE_BY_CELL = {("transformers", "xdev-xccl", "bf16"): 1e-2}
# DeepSpeed's cpu accelerator builds its shared-memory allreduce op (deepspeed_shm_comm) the
# first time on a machine (minutes on 2 cores; cached in ~/.cache/torch_extensions).
TIMEOUT_BY_CELL = {("deepspeed-zero1", "cpu-gloo"): 900, ("deepspeed-zero2", "cpu-gloo"): 900}

# name: (script, extra args, package it needs, environment for cpu runs)
CLIENTS = {
    "ddp": ("client_ddp.py", ["--client", "ddp"], None, {}),
    "fsdp2": ("client_ddp.py", ["--client", "fsdp2"], None, {}),
    "lightning": ("client_lightning.py", [], "pytorch_lightning", {}),
    "deepspeed-zero1": ("client_deepspeed.py", ["--stage", "1"], "deepspeed",
                        {"DS_ACCELERATOR": "cpu"}),
    "deepspeed-zero2": ("client_deepspeed.py", ["--stage", "2"], "deepspeed",
                        {"DS_ACCELERATOR": "cpu"}),
    "transformers": ("client_transformers.py", [], "transformers", {}),
}
CONFIGS = {"cpu-gloo": ("cpu", "gloo"), "cpu-xccl": ("cpu", "xccl"), "xdev-xccl": ("xdev", "xccl")}
PRECISIONS = ("fp32", "bf16")


def installed(package: str | None) -> bool:
    return package is None or importlib.util.find_spec(package) is not None


def where_it_ran(run: dict, device: str) -> list[str]:
    """What each client reports about where it computed; empty when it is as asked."""
    problems = []
    for r in run["ranks"] or []:
        seen = r.get("batch_devices") or [r.get("param_device", "")]
        if not all(str(s).startswith(device) for s in seen):
            problems.append(f"rank computed on {seen}, asked for {device}")
        if "tied" in r and not r["tied"]:
            problems.append("lm_head is no longer tied to wte")
        want = "torch.bfloat16" if r["precision"] == "bf16" else "torch.float32"
        if "compute_dtypes" in r and r["compute_dtypes"] != [want]:
            problems.append(f"matmuls ran in {r['compute_dtypes']}, expected {want}")
        if r.get("pg_backend") not in (None, "undefined", r["backend"]):
            problems.append(f"process group backend {r['pg_backend']}, asked for {r['backend']}")
    return problems


def run_cell(client: str, config: str, precision: str, workdir: str, timeout: float) -> dict:
    script, extra, _, cpu_env = CLIENTS[client]
    device, backend = CONFIGS[config]
    out = os.path.join(workdir, f"{client}-{config}-{precision}")
    env = cpu_env if device == "cpu" else {}
    timeout = max(timeout, TIMEOUT_BY_CELL.get((client, config), 0))
    return common.launch(script, device, backend, precision, out, extra, timeout=timeout,
                         env_extra=env)


def judge(run: dict, reference: dict | None, device: str, tolerance: float = TOLERANCE) -> dict:
    cell = common.compare(run, reference)
    if "error" in cell:
        return cell
    cell["problems"] = where_it_ran(run, device)
    if reference is not None and not reference.get("ranks"):
        cell["problems"].append("the reference run (cpu over gloo) failed")
    diff = cell.get("max_diff")
    cell["tolerance"] = tolerance
    cell["ok"] = (cell["ranks_identical"] and cell["finite"] and not cell["problems"]
                  and (diff is None or diff <= tolerance))
    return cell


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", default=",".join(CLIENTS))
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    p.add_argument("--json", help="write every cell here")
    p.add_argument("--keep", help="directory for the runs' files (default: a temporary one)")
    args = p.parse_args(argv)
    clients = [c for c in args.clients.split(",") if c]
    configs = [c for c in args.configs.split(",") if c]
    if "cpu-gloo" not in configs:
        configs.insert(0, "cpu-gloo")  # the reference
    workdir = args.keep or tempfile.mkdtemp(prefix="xccl-clients-")
    cells, failed = {}, 0
    for client in clients:
        if not installed(CLIENTS[client][2]):
            cells[client] = {"skipped": f"{CLIENTS[client][2]} is not installed"}
            print(f"{client:16} skipped: {CLIENTS[client][2]} is not installed", flush=True)
            continue
        for precision in args.precisions.split(","):
            reference = None
            for config in configs:
                run = run_cell(client, config, precision, workdir, args.timeout)
                if config == "cpu-gloo":
                    reference = run
                cell = judge(run, reference if config != "cpu-gloo" else None,
                             CONFIGS[config][0],
                             TOLERANCE_BY_CELL.get((client, config, precision), TOLERANCE))
                cells[f"{client}/{config}/{precision}"] = cell
                failed += not cell.get("ok", False)
                shown = {k: v for k, v in cell.items() if k != "error"}
                print(f"{client:16} {config:9} {precision:4} "
                      f"{'ok  ' if cell.get('ok') else 'FAIL'} {json.dumps(shown)}", flush=True)
                if "error" in cell:
                    print(cell["error"], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(cells, f, indent=1, sort_keys=True)
    print(f"clients matrix: {sum(1 for c in cells.values() if c.get('ok'))} ok, {failed} failed, "
          f"{sum(1 for c in cells.values() if 'skipped' in c)} skipped (runs in {workdir})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
