#!/usr/bin/env python3
"""Summarise a scripts/gpu_check.sh run: OUT/logs/results.tsv and the steps' logs and JSON
files become OUT/summary.json (one object: each step's status, seconds and the figures parsed
from its log, every JSON result inlined) and a short table on stdout.

Usage: python scripts/gpu_check_summary.py OUT [--seconds N]
"""
import argparse
import datetime
import glob
import json
import os
import re

# (step, key, regex over the step's log): every match is collected, as int where it can be.
PATTERNS = [
    ("info", "gpu", r"^gpu (.+)$"),
    ("info", "torch", r"^python \S+ torch (\S+)"),
    ("info", "nccl", r"^nccl (.+)$"),
    ("info", "driver", r"Driver Version: (\S+)"),
    ("ctest", "ctest", r"(\d+% tests passed, \d+ tests? failed out of \d+)"),
    ("conform", "conformance", r"(conformance: \d+ checks, \d+ wrong)"),
    ("pytest", "pytest", r"^=*\s*(\d+ (?:passed|failed).*?)\s*=*$"),
    ("bench", "latency_8B_us", r"8 B allreduce, synchronized: ([\d.]+) us"),
    ("plugin", "import", r"^(torch_xccl .+)$"),
]


def parse_log(step, text):
    found = {}
    for s, key, rx in PATTERNS:
        if s != step:
            continue
        vals = re.findall(rx, text, flags=re.M)
        if vals:
            found[key] = vals if len(vals) > 1 else vals[0]
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seconds", type=int, default=None)
    a = ap.parse_args()
    logs = os.path.join(a.out, "logs")
    steps = []
    results = os.path.join(logs, "results.tsv")
    if os.path.exists(results):
        with open(results) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 4:
                    continue
                name, status, secs, reason = parts[:4]
                entry = {"step": name, "status": status, "seconds": int(secs), "reason": reason}
                path = os.path.join(logs, name + ".log")
                if os.path.exists(path):
                    with open(path, errors="replace") as lf:
                        text = lf.read()
                    entry.update(parse_log(name, text))
                    if status != "pass":
                        entry["log_tail"] = text.splitlines()[-40:]
                steps.append(entry)
    data = {}
    for path in sorted(glob.glob(os.path.join(logs, "*.json"))):
        try:
            with open(path) as f:
                data[os.path.basename(path)[:-5]] = json.load(f)
        except (OSError, ValueError) as e:
            data[os.path.basename(path)[:-5]] = {"unreadable": str(e)}
    summary = {
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seconds": a.seconds,
        "ok": bool(steps) and all(s["status"] in ("pass", "skipped") for s in steps),
        "steps": steps,
        "results": data,
    }
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{'step':<9}{'status':<9}{'s':>5}  figures")
    for s in steps:
        figs = {k: v for k, v in s.items()
                if k not in ("step", "status", "seconds", "reason", "log_tail")}
        extra = s["reason"] if s["status"] == "skipped" else json.dumps(figs)[:150]
        print(f"{s['step']:<9}{s['status']:<9}{s['seconds']:>5}  {extra}")
    print(f"summary: {os.path.join(a.out, 'summary.json')} ({len(data)} result files inlined)")


if __name__ == "__main__":
    main()
