"""Reads the flight-recorder dumps of a job's ranks and says which rank is stuck where.

    python -m torch_xccl.fr_trace DIR [--json]
    xccl-fr-trace DIR                       # the same, installed as a command

DIR holds one ``rank_<r>.json`` per process, written by torch_xccl's flight recorder
(docs/RELIABILITY.md, "Flight recorder") on a failure or timeout, on SIGUSR1, or by
``torch_xccl.dump_flight_record()``. For each process group it reports

* the last collective every rank completed;
* the first collective some rank is in but did not complete, and for it each rank's part:
  completed, in progress (issued, not completed: stuck in it), failed, timed out, not issued
  (the rank is *behind*) or no dump (the rank died, or could not write);
* collectives whose op, dtype or sizes differ across ranks at one number (a mismatch);
* point-to-point operations still pending;

then one verdict line per group. ``--json`` prints the same as one JSON object.
Exit status: 0 when nothing is wrong, 1 when a problem is found, 2 when there is no dump.

Collectives are matched across ranks by their number in the group (``collective_seq``): every
rank numbers a group's collectives 1, 2, ... in issue order, so one collective has one
number everywhere. Point-to-point numbers are per rank and are not matched.

The analyser needs only the standard library: ``python torch_xccl/fr_trace.py DIR`` works
where torch is not installed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

FORMAT_MAJOR = "1"

# Which tensors must agree across ranks for one collective (beyond the op and the dtype):
# the inputs, the outputs, or neither (split sizes may differ per rank; a root's side differs).
SAME_INPUTS = {
    "allreduce", "allreduce_coalesced", "broadcast", "reduce", "allgather", "_allgather_base",
    "allgather_coalesced", "allgather_into_tensor_coalesced", "reduce_scatter",
    "_reduce_scatter_base", "reduce_scatter_tensor_coalesced", "gather", "barrier",
}
SAME_OUTPUTS = {"scatter"}

IN_PROGRESS = ("scheduled", "started")
ENDED_BADLY = ("failed", "timed_out")


class DumpError(Exception):
    pass


# ---------------------------------------------------------------- loading

def _load_file(path):
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    if not isinstance(d, dict) or "entries" not in d or "rank" not in d:
        raise DumpError(f"{path}: not a torch_xccl flight-recorder dump")
    version = str(d.get("version", ""))
    if version.split(".")[0] != FORMAT_MAJOR:
        raise DumpError(f"{path}: dump format {version!r}, this analyser reads {FORMAT_MAJOR}.x")
    d["path"] = path
    d["group_info"] = {g["name"]: g for g in d.get("groups", [])}
    return d


def load(paths):
    """{global rank: dump} from files and directories (every *.json in them), and notes."""
    files, notes = [], []
    for p in paths:
        if os.path.isdir(p):
            files += [os.path.join(p, n) for n in sorted(os.listdir(p)) if n.endswith(".json")]
        else:
            files.append(p)
    dumps = {}
    for path in files:
        try:
            d = _load_file(path)
        except (OSError, ValueError, DumpError) as e:
            notes.append(f"skipped {e}" if isinstance(e, DumpError) else f"skipped {path}: {e}")
            continue
        r = d["rank"]
        if r in dumps and dumps[r]["time_ns"] >= d["time_ns"]:
            notes.append(f"{path}: an older dump of rank {r} than {dumps[r]['path']}, skipped")
            continue
        dumps[r] = d
    return dumps, notes


# ---------------------------------------------------------------- describing entries

def _sizes(sizes):
    if len(sizes) == 1:
        return str(sizes[0])
    return "[" + ", ".join(str(s) for s in sizes) + "]"


def signature(e):
    """What must agree across ranks for a collective: (op, dtype, sizes or None)."""
    dtypes = e["input_dtypes"] + e["output_dtypes"]
    dtype = dtypes[0] if dtypes else None
    op = e["op"]
    sizes = None
    if op in SAME_INPUTS:
        sizes = e["input_sizes"]
    elif op in SAME_OUTPUTS:
        sizes = e["output_sizes"]
    return (op, dtype, json.dumps(sizes))


def call(e):
    """allreduce(float32, [8]) — the op with its first dtype and the inputs' sizes."""
    dtypes = e["input_dtypes"] or e["output_dtypes"]
    sizes = e["input_sizes"] or e["output_sizes"]
    args = ", ".join(x for x in (dtypes[0] if dtypes else "", _sizes(sizes) if sizes else "") if x)
    return f"{e['op']}({args})"


def _secs(ms):
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"


def _first_line(text, limit=200):
    line = (text or "").split("\n", 1)[0]
    return line if len(line) <= limit else line[:limit] + "..."


def part(e, dump):
    """One rank's part in a collective, as words."""
    state = e["state"]
    if state == "completed":
        return "completed"
    if state in IN_PROGRESS:
        since = e["time_started_ns"] or e["time_enqueued_ns"]
        age = (dump["time_ns"] - since) / 1e6 if since else None
        what = "in progress" if state == "started" else "queued behind an earlier op"
        return what + (f" for {_secs(age)} when dumped" if age is not None else "")
    took = e["duration_ms"]
    if took is None and e["time_enqueued_ns"] and e["time_ended_ns"]:
        took = (e["time_ended_ns"] - e["time_enqueued_ns"]) / 1e6
    words = "timed out" if state == "timed_out" else "failed"
    return words + (f" after {_secs(took)}" if took is not None else "") + (
        f": {_first_line(e['error'])}" if e.get("error") else "")


def _ranks(rs):
    rs = sorted(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r) for r in rs)


# ---------------------------------------------------------------- analysis

def _rank_view(name, dump):
    entries = [e for e in dump["entries"] if e["group"] == name]
    coll = {e["collective_seq"]: e for e in entries if not e["is_p2p"]}
    issued = max(coll, default=0)
    incomplete = sorted(s for s, e in coll.items() if e["state"] != "completed")
    return {
        "coll": coll,
        "issued": issued,
        "oldest": min(coll, default=0),
        "incomplete": incomplete,
        "first_not_done": incomplete[0] if incomplete else issued + 1,
        "p2p_pending": [e for e in entries if e["is_p2p"] and e["state"] != "completed"],
    }


def _mismatches(views):
    found = []
    seqs = sorted({s for v in views.values() for s in v["coll"]})
    for s in seqs:
        by_sig = {}
        for r, v in views.items():
            e = v["coll"].get(s)
            if e is not None:
                by_sig.setdefault(signature(e), []).append((r, e))
        if len(by_sig) > 1:
            found.append({"seq": s, "calls": [
                {"ranks": sorted(r for r, _ in group), "call": call(group[0][1])}
                for group in by_sig.values()]})
    return found


def analyse_group(name, ranks, dumps):
    views = {r: _rank_view(name, dumps[r]) for r in ranks
             if r in dumps and name in dumps[r]["group_info"]}
    missing = [r for r in ranks if r not in views]
    out = {"group": name, "ranks": ranks, "missing": missing, "ranks_with_dump": sorted(views)}
    if not views:
        out.update(problem=True, verdict=f"no dump of any rank of group '{name}'")
        return out
    last_all = min(v["first_not_done"] for v in views.values()) - 1
    out["last_completed_by_all"] = last_all
    out["last_completed_by_all_op"] = next(
        (call(v["coll"][last_all]) for v in views.values() if last_all in v["coll"]), None)
    out["issued"] = {r: v["issued"] for r, v in views.items()}
    stuck = min((v["incomplete"][0] for v in views.values() if v["incomplete"]), default=None)
    out["first_incomplete"] = stuck
    mism = _mismatches(views)
    out["mismatches"] = mism
    out["p2p_pending"] = [{"rank": r, "op": e["op"], "p2p_seq": e["p2p_seq"], "state": e["state"],
                           "part": part(e, dumps[r])}
                          for r, v in views.items() for e in v["p2p_pending"]]
    parts, status = {}, {}
    if stuck is not None:
        first = next(v["coll"][stuck] for v in views.values() if stuck in v["coll"])
        out["first_incomplete_op"] = call(first)
        for r in ranks:
            if r not in views:
                status[r], parts[r] = "no_dump", "no dump (died, or could not write one)"
                continue
            v = views[r]
            e = v["coll"].get(stuck)
            if e is not None:
                status[r] = "in_progress" if e["state"] in IN_PROGRESS else e["state"]
                parts[r] = part(e, dumps[r])
            elif v["issued"] < stuck:
                status[r] = "not_issued"
                last = v["coll"].get(v["issued"])
                parts[r] = "not issued: behind" + (
                    f" (its last: #{v['issued']} {call(last)}, {last['state']})" if last
                    else " (it issued no collective on this group)")
            else:
                status[r], parts[r] = "not_recorded", "dropped from its buffer"
    out["status"] = status
    out["parts"] = parts
    out["verdict"], out["problem"] = _verdict(name, out, views)
    return out


def _verdict(name, g, views):
    stuck, status, missing = g["first_incomplete"], g["status"], g["missing"]
    def having(*states):
        return [r for r, s in status.items() if s in states]
    if stuck is None:
        counts = sorted(set(g["issued"].values()))
        problem = bool(missing or g["mismatches"] or g["p2p_pending"])
        if len(counts) <= 1:
            text = f"every rank with a dump completed collectives #1..#{counts[0] if counts else 0}"
        else:
            ahead = [r for r, n in g["issued"].items() if n == counts[-1]]
            text = (f"nothing in progress; {_ranks(ahead)} issued up to #{counts[-1]}, others "
                    f"fewer (dumps taken at different moments?)")
        if missing:
            text += f"; {_ranks(missing)} left no dump"
        if g["p2p_pending"]:
            text += f"; {len(g['p2p_pending'])} point-to-point op(s) pending"
        return text, problem
    op = f"collective #{stuck} {g['first_incomplete_op']}"
    waiting = having("in_progress", "failed", "timed_out")
    behind = having("not_issued")
    at_stuck = [m for m in g["mismatches"] if m["seq"] == stuck]
    if at_stuck:
        calls = "; ".join(f"{_ranks(c['ranks'])} {c['call']}" for c in at_stuck[0]["calls"])
        text = f"ranks disagree at collective #{stuck}: {calls}"
    elif behind:
        how = " or ".join(words for state, words in (
            ("in_progress", "waiting in"), ("timed_out", "timed out in"), ("failed", "failed in"))
            if having(state))
        text = (f"{_ranks(behind)} {'is' if len(behind) == 1 else 'are'} behind: never issued "
                f"{op}, which {_ranks(waiting)} " + (how if waiting else "completed"))
    elif having("no_dump"):
        text = (f"{op} did not complete on {_ranks(waiting)}; {_ranks(having('no_dump'))} left "
                f"no dump (died?)")
    elif having("failed", "timed_out") and not having("in_progress"):
        text = f"{op} failed on {_ranks(waiting)}: no rank is behind; see the errors"
    elif having("in_progress") and len(having("in_progress")) + len(having("completed")) == len(
            status):
        text = (f"{op} issued by every rank and not completed on {_ranks(having('in_progress'))}: "
                f"stuck inside the collective (or dumped while it ran)")
    else:
        text = f"{op} did not complete on {_ranks(waiting)}"
    return text, True


def analyse(dumps):
    groups, notes = {}, []
    for r in sorted(dumps):
        for gname, info in dumps[r]["group_info"].items():
            if gname in groups and groups[gname] != info["ranks"]:
                notes.append(f"group '{gname}': rank {r} lists ranks {info['ranks']}, "
                             f"others {groups[gname]}")
            groups.setdefault(gname, info["ranks"])
    world = max([d.get("world_size", -1) for d in dumps.values()] + [0])
    expected = set(range(world)) | {r for rs in groups.values() for r in rs}
    missing = sorted(expected - set(dumps))
    reports = [analyse_group(name, ranks, dumps) for name, ranks in groups.items()]
    return {
        "ranks": sorted(dumps),
        "world_size": world,
        "missing_dumps": missing,
        "dumps": {r: {"path": d["path"], "pid": d.get("pid"), "hostname": d.get("hostname"),
                      "reason": d.get("reason"), "time_ns": d.get("time_ns"),
                      "entries": len(d["entries"])} for r, d in sorted(dumps.items())},
        "groups": reports,
        "notes": notes,
        "problem": bool(missing) or any(g["problem"] for g in reports),
    }


# ---------------------------------------------------------------- output

def _when(ns):
    if not ns:
        return "?"
    t = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return t.strftime("%H:%M:%S.%f")[:-3] + " UTC"


def render(report, where):
    lines = [f"xccl flight recorder: {len(report['ranks'])} dump(s) in {where}"
             + (f", world size {report['world_size']}" if report["world_size"] > 0 else "")]
    for r, d in report["dumps"].items():
        lines.append(f"  rank {r}: pid {d['pid']} on {d['hostname']}, {d['entries']} entries, "
                     f"dumped {_when(d['time_ns'])} ({_first_line(d['reason'], 120)})")
    for r in report["missing_dumps"]:
        lines.append(f"  rank {r}: no dump (died, or could not write one)")
    for n in report["notes"]:
        lines.append(f"  note: {n}")
    for g in report["groups"]:
        lines.append("")
        lines.append(f"group '{g['group']}' ({_ranks(g['ranks'])})")
        if "last_completed_by_all" in g:
            last = g["last_completed_by_all"]
            op = g.get("last_completed_by_all_op")
            lines.append("  last collective completed by every rank: "
                         + (f"#{last}" + (f" {op}" if op else "") if last > 0 else "none"))
        if g.get("first_incomplete") is not None:
            lines.append(f"  first collective not completed: #{g['first_incomplete']} "
                         f"{g['first_incomplete_op']}")
            for r in g["ranks"]:
                lines.append(f"    rank {r}: {g['parts'][r]}")
        for m in g.get("mismatches", [])[:10]:
            calls = "; ".join(f"{_ranks(c['ranks'])} {c['call']}" for c in m["calls"])
            lines.append(f"  mismatch at collective #{m['seq']}: {calls}")
        for p in g.get("p2p_pending", [])[:10]:
            lines.append(f"  pending point-to-point: rank {p['rank']} {p['op']} "
                         f"(p2p #{p['p2p_seq']}): {p['part']}")
        lines.append(f"  verdict: {g['verdict']}")
    lines.append("")
    lines.append("PROBLEM FOUND" if report["problem"] else "no problem found")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="xccl-fr-trace",
        description="Analyse torch_xccl flight-recorder dumps: which rank is stuck where.")
    ap.add_argument("paths", nargs="+", help="directories of rank_<r>.json dumps, or dump files")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    dumps, notes = load(args.paths)
    if not dumps:
        for n in notes:
            print(f"note: {n}", file=sys.stderr)
        print(f"xccl-fr-trace: no flight-recorder dump in {' '.join(args.paths)}", file=sys.stderr)
        return 2
    report = analyse(dumps)
    report["notes"] = notes + report["notes"]
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        print(render(report, " ".join(args.paths)))
    return 1 if report["problem"] else 0


if __name__ == "__main__":
    sys.exit(main())
