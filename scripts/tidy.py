#!/usr/bin/env python3
"""clang-tidy (.clang-tidy) on the core's sources, with a result cache so CI can afford it.

    python3 scripts/tidy.py            # every core file; exit 1 on any finding
    python3 scripts/tidy.py --no-cache # run clang-tidy on every file again

A full run is about 200 s on two cores (the clang static analyzer is most of it). A file's
findings depend only on the text clang-tidy reads: the file, every header it includes (system
ones too), the compiler flags, .clang-tidy and clang-tidy's version. So each file's findings
are kept under a digest of exactly those (the header list comes from the compiler's own `-M`
output, a fraction of a second per file), in $XCCL_TIDY_CACHE (default ~/.cache/xccl-tidy),
next to where ccache keeps its objects. A change to one source re-checks that file; a change
to a widely included header re-checks every file that includes it; nothing is ever reused
for text it was not computed on. Findings are stored with repository-relative paths, so a
checkout anywhere (a fresh CI clone) shares the cache.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def core_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "csrc/common/*.cc", "csrc/collectives/*.cc"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in out if "/xdev/" not in f and "/cuda/" not in f]


def compile_args(db: Path) -> dict[str, tuple[list[str], str]]:
    """Source path (repo-relative) -> (its compile command's arguments, its directory)."""
    out = {}
    for entry in json.loads(db.read_text()):
        args = entry.get("arguments") or shlex.split(entry["command"])
        path = os.path.relpath(os.path.join(entry["directory"], entry["file"]), REPO)
        out[path] = (args, entry["directory"])
    return out


def dependencies(args: list[str], directory: str) -> list[str]:
    """Every file the compiler reads for this source (its -M list, in order)."""
    cmd, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        cmd.append(a)
    p = subprocess.run(cmd + ["-M", "-MF", "/dev/stdout"], cwd=directory, capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(f"dependency scan failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    text = p.stdout.replace("\\\n", " ")
    return text.split(":", 1)[1].split()


def digest(src: str, args: list[str], directory: str, salt: bytes) -> str:
    h = hashlib.sha256(salt)
    root = str(REPO)
    # Flags with this checkout's path taken out: another clone's identical flags match.
    h.update(" ".join(a.replace(root, ".") for a in args if a != "-o").encode())
    for dep in dependencies(args, directory):
        path = Path(directory, dep)
        h.update(os.path.relpath(path, REPO).encode() if str(path).startswith(root) else
                 dep.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def run_tidy(src: str) -> str:
    p = subprocess.run(["clang-tidy", "-p", "build", "--quiet", src], cwd=REPO,
                       capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if re.search(r"(warning|error):", ln)]
    if p.returncode != 0 and not lines:  # a crash or a compile error with no diagnostic line
        lines = [f"{src}: error: clang-tidy exited {p.returncode}: {p.stderr.strip()[-500:]}"]
    return "".join(ln.replace(str(REPO) + "/", "") + "\n" for ln in lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-cache", action="store_true", help="check every file again")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    opts = ap.parse_args()
    db = REPO / "build" / "compile_commands.json"
    if not db.exists():
        print(f"tidy: {db} missing: configure the core with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
        return 1
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True).stdout
    salt = (version + (REPO / ".clang-tidy").read_text()).encode()
    cache = Path(os.environ.get("XCCL_TIDY_CACHE", Path.home() / ".cache" / "xccl-tidy"))
    cache.mkdir(parents=True, exist_ok=True)
    commands = compile_args(db)
    files = core_files()
    missing = [f for f in files if f not in commands]
    if missing:
        print(f"tidy: not in {db.name} (not built?): {' '.join(missing)}")
        return 1

    def check(src: str) -> tuple[str, bool]:
        key = cache / (digest(src, *commands[src], salt) + ".txt")
        if key.exists() and not opts.no_cache:
            return key.read_text(), True
        found = run_tidy(src)
        tmp = key.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(found)
        tmp.replace(key)
        return found, False

    with cf.ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        results = list(pool.map(check, files))
    # A header's finding is reported by every file that includes it: once here.
    findings = sorted({ln for text, _ in results for ln in text.splitlines()})
    hits = sum(1 for _, hit in results if hit)
    for ln in findings[:50]:
        print(ln)
    print(f"lint: clang-tidy: {len(findings)} finding(s) in {len(files)} core files "
          f"({len(files) - hits} checked, {hits} unchanged since a cached check)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
