#!/usr/bin/env python3
"""Plot bus bandwidth against size from a bench_torch.py JSON: one panel per collective,
xccl (solid) and Gloo (dashed) per world size, single-thread memcpy as a horizontal line.

Usage: python bench/plot.py bench/results/<name>.json [-o bench/results/<name>.png]
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

ORDER = ["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"]
COLORS = {"xccl": ["tab:blue", "tab:purple", "tab:cyan"],
          "gloo": ["tab:orange", "tab:red", "tab:brown"]}


def size_label(v, _pos=None):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if v >= m:
            return f"{v / m:g}{unit}"
    return f"{v:g}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json")
    p.add_argument("-o", "--out", default=None, help="PNG path (default: JSON path with .png)")
    p.add_argument("--metric", choices=["busbw", "time"], default="busbw")
    a = p.parse_args()
    with open(a.json) as f:
        d = json.load(f)
    if d.get("kind") != "collectives":
        raise SystemExit("expected a bench_torch.py JSON (kind=collectives)")
    runs = [r for r in d["runs"] if "results" in r]
    colls = [c for c in ORDER if any(x["collective"] == c for r in runs for x in r["results"])]
    memcpy = max((m["best_GBps"] for m in (d.get("memcpy") or [])
                  if m["bytes"] == max(mm["bytes"] for mm in d["memcpy"])), default=None)

    ncol = 3 if len(colls) > 2 else len(colls)
    nrow = (len(colls) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 4.0 * nrow), squeeze=False)
    for ax, coll in zip(axes.flat, colls):
        for i, run in enumerate(runs):
            n = run["world_size"]
            rows = [x for x in run["results"] if x["collective"] == coll]
            xs = [x["bytes"] for x in rows]
            tag = f"{n} ranks" + (" (oversubscribed)" if run.get("oversubscribed") else "")
            for b, ls in (("xccl", "-"), ("gloo", "--")):
                key = "busbw_GBps" if a.metric == "busbw" else "time_us"
                ys = [x[b][key] for x in rows]
                ax.plot(xs, ys, ls, marker="o", ms=3, color=COLORS[b][i % 3],
                        label=f"{b}, {tag}")
        if memcpy and a.metric == "busbw":
            ax.axhline(memcpy, color="gray", ls=":", lw=1.5,
                       label=f"1-thread memcpy, 64MiB ({memcpy:.1f} GB/s)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.set_title(coll, fontweight="bold" if coll == "allreduce" else "normal")
        ax.set_xlabel("size (bytes, nccl-tests definition)")
        ax.set_ylabel("bus bandwidth (GB/s)" if a.metric == "busbw" else "time per op (us)")
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(axes.flat)[len(colls):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if len(colls) < nrow * ncol:  # legend in the empty panel
        list(axes.flat)[len(colls)].legend(handles, labels, loc="center", fontsize=10)
    else:
        axes.flat[0].legend(fontsize=8)
    m = d["meta"]
    fig.suptitle(f"torch_xccl (libxccl {m.get('libxccl')}) vs Gloo, float32, CPU; "
                 f"torch {m.get('torch')}, {m.get('cpu_count')} CPUs, {m.get('date', '')[:10]}",
                 fontsize=11)
    fig.tight_layout()
    out = a.out or os.path.splitext(a.json)[0] + (".png" if a.metric == "busbw" else "_time.png")
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
