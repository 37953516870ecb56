#!/usr/bin/env python3
"""The results page: one self-contained HTML file with every table of BENCHMARKS.md, under
its section headings, and the PNG plots of bench/ (embedded, base64), each in the section
that links it (the ones no section links come last).

    python3 bench/report.py                      # writes build/report.html
    python3 bench/report.py -o out.html [--benchmarks BENCHMARKS.md] [--plots bench]

Nothing is fetched: no script, no external style or image. tests/python/test_browser.py
opens the page in headless Chromium and checks that the tables and images render.
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import glob
import html
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STYLE = """
body{font-family:sans-serif;margin:16px 24px;max-width:1400px;color:#222}
h1{font-size:1.5em} h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1.05em}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #bbb;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#e8eef7} tr:nth-child(even) td{background:#f7f7f7}
code{background:#eee;padding:0 2px} figure{margin:12px 0}
figure img{max-width:900px;width:100%;border:1px solid #ccc}
figcaption{font-size:12px;color:#555}
""".strip()


@dataclasses.dataclass
class Section:
    level: int
    title: str
    tables: list = dataclasses.field(default_factory=list)   # [(header, rows)]
    plots: list = dataclasses.field(default_factory=list)    # repository-relative PNG paths


def split_row(line: str) -> list[str]:
    """The cells of a markdown table row; '\\|' is a pipe inside a cell."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


def is_separator(line: str) -> bool:
    cells = split_row(line)
    return bool(cells) and all(re.fullmatch(r":?-{3,}:?", c) for c in cells)


def parse(markdown: str) -> list[Section]:
    """Headings, tables (header row, separator row, body rows) and the bench/*.png each
    section links. Text inside ``` fences is skipped."""
    sections = [Section(1, "")]
    lines = markdown.splitlines()
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
            i += 1
            continue
        if fenced:
            i += 1
            continue
        m = re.match(r"(#{1,4})\s+(.*)", line)
        if m:
            sections.append(Section(len(m.group(1)), m.group(2).strip()))
        elif line.lstrip().startswith("|") and i + 1 < len(lines) and is_separator(lines[i + 1]):
            header = split_row(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(split_row(lines[i]))
                i += 1
            sections[-1].tables.append((header, rows))
            continue
        for png in re.findall(r"\bbench/[\w.-]+\.png\b", line):
            if png not in sections[-1].plots:
                sections[-1].plots.append(png)
        i += 1
    return sections


def inline(text: str) -> str:
    """Markdown's inline marks in a cell: `code`, **bold**, [text](link); the rest escaped."""
    out = []
    for k, part in enumerate(re.split(r"(`[^`]*`)", text)):
        if k % 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        s = html.escape(part, quote=False)
        s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
        s = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", lambda m: f"<a href=\"{html.escape(m.group(2))}\">"
                   f"{m.group(1)}</a>", s)
        out.append(s)
    return "".join(out)


def table_html(header: list[str], rows: list[list[str]]) -> str:
    width = len(header)
    head = "".join(f"<th>{inline(c)}</th>" for c in header)
    body = []
    for r in rows:
        r = (r + [""] * width)[:width] if len(r) != width else r
        body.append("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(body) + "\n</tbody></table>"


def plot_html(path: str, root: str) -> str:
    with open(os.path.join(root, path), "rb") as f:
        data = base64.b64encode(f.read()).decode()
    name = html.escape(path)
    return (f"<figure><img alt=\"{name}\" data-src=\"{name}\" src=\"data:image/png;base64,{data}\">"
            f"<figcaption>{name}</figcaption></figure>")


def last_change(path: str) -> str:
    try:
        r = subprocess.run(["git", "log", "-1", "--format=%h %cs", "--", os.path.basename(path)],
                           cwd=os.path.dirname(path) or ".", capture_output=True, text=True, timeout=20)
        return r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def build(benchmarks: str, plots_dir: str, root: str = ROOT) -> tuple[str, dict]:
    """(the page, counts: tables, rows, plots)."""
    with open(benchmarks, encoding="utf-8") as f:
        sections = parse(f.read())
    pngs = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(plots_dir, "*.png")))
    placed = {p for s in sections for p in s.plots if p in pngs}
    parts = []
    tables = rows = plots = 0
    for s in sections:
        shown = [p for p in s.plots if p in pngs]
        if not s.tables and not shown:
            continue
        if s.title:
            level = min(max(s.level, 2), 3)
            parts.append(f"<h{level}>{inline(s.title)}</h{level}>")
        for header, body in s.tables:
            parts.append(table_html(header, body))
            tables += 1
            rows += len(body)
        for p in shown:
            parts.append(plot_html(p, root))
            plots += 1
    rest = [p for p in pngs if p not in placed]
    if rest:
        parts.append("<h2>Other plots</h2>")
        for p in rest:
            parts.append(plot_html(p, root))
            plots += 1
    source = os.path.relpath(benchmarks, root)
    when = last_change(benchmarks)
    page = ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>xccl results</title>\n"
            f"<style>{STYLE}</style></head><body>\n"
            f"<h1>xccl results</h1>\n<p>{tables} table(s) from {html.escape(source)}"
            f"{' (last changed ' + html.escape(when) + ')' if when else ''} and {plots} plot(s) "
            f"from {html.escape(os.path.relpath(plots_dir, root))}/.</p>\n"
            + "\n".join(parts) + "\n</body></html>\n")
    return page, {"tables": tables, "rows": rows, "plots": plots}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default=os.path.join(ROOT, "build", "report.html"))
    p.add_argument("--benchmarks", default=os.path.join(ROOT, "BENCHMARKS.md"))
    p.add_argument("--plots", default=os.path.join(ROOT, "bench"), help="folder of *.png plots")
    args = p.parse_args(argv)
    page, counts = build(os.path.abspath(args.benchmarks), os.path.abspath(args.plots))
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"report: {args.output}: {counts['tables']} table(s), {counts['rows']} row(s), "
          f"{counts['plots']} plot(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
