"""The flight recorder: what it records, when it dumps, and what the analyser makes of it.

Real processes (harness.run_world) with hard timeouts. The timeout case uses a 3 s group
timeout; the analyser runs as a command (`python -m torch_xccl.fr_trace DIR`), as an
operator would run it.
"""
import json
import os
import subprocess
import sys

import pytest

import workers_flight_recorder as w
from harness import REPO, run_world


def analyse(trace_dir, *extra):
    """(exit status, text report, JSON report) of the analyser on trace_dir."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "torch_xccl.fr_trace", str(trace_dir), *extra]
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    js = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120, env=env)
    assert text.returncode == js.returncode, (text.stdout, text.stderr, js.stderr)
    return text.returncode, text.stdout + text.stderr, json.loads(js.stdout or "null")


def load(trace_dir, rank):
    with open(os.path.join(trace_dir, f"rank_{rank}.json")) as f:
        return json.load(f)


def group_entries(record, group, p2p=False):
    return [e for e in record["entries"] if e["group"] == group and e["is_p2p"] == p2p]


@pytest.fixture
def trace_dir(tmp_path, monkeypatch):
    d = tmp_path / "trace"
    monkeypatch.setenv("TORCH_XCCL_TRACE_DIR", str(d))
    return d


@pytest.mark.timeout(150)
def test_entries_have_the_fields_and_states(trace_dir):
    results = run_world(w.fields_and_states, 2, timeout=120)
    ops = ["allreduce", "broadcast", "allgather", "barrier"]
    for rank, r in enumerate(results):
        done = r["done"]
        assert done["rank"] == rank and done["world_size"] == 2 and done["pid"] == r["pid"]
        assert done["hostname"] and done["version"].startswith("1.")
        assert done["buffer_size"] == 2000
        groups = {g["name"]: g for g in done["groups"]}
        assert groups["0"]["ranks"] == [0, 1] and groups["0"]["rank"] == rank
        assert groups["1"]["ranks"] == [0, 1]
        coll = group_entries(done, "0")
        assert [e["op"] for e in coll] == ops, coll
        assert [e["collective_seq"] for e in coll] == [1, 2, 3, 4]
        assert all(e["state"] == "completed" and e["error"] is None for e in done["entries"])
        for e in done["entries"]:
            assert e["time_enqueued_ns"] <= e["time_started_ns"] <= e["time_ended_ns"], e
            assert e["duration_ms"] >= 0 and e["device"] == "cpu" and e["timeout_ms"] > 0
        ar, bc, ag, _ = coll
        assert ar["input_sizes"] == [[4, 2]] and ar["input_dtypes"] == ["float32"]
        assert ar["output_sizes"] == [[4, 2]] and ar["output_dtypes"] == ["float32"]
        assert bc["input_sizes"] == [[3]] and bc["input_dtypes"] == ["int64"]
        assert ag["input_sizes"] == [[5]] and ag["output_sizes"] == [[5], [5]]
        assert ag["output_dtypes"] == ["float16", "float16"]
        (p2p,) = group_entries(done, "0", p2p=True)
        assert p2p["op"] == ("send" if rank == 0 else "recv") and p2p["p2p_seq"] == 1
        assert p2p["collective_seq"] == 0
        (sub,) = group_entries(done, "1")
        assert sub["op"] == "allreduce" and sub["collective_seq"] == 1

    # rank 1, while rank 0 had not sent yet: the receive runs, the allreduce waits behind it
    pending = results[1]["pending"]
    recv = group_entries(pending, "0", p2p=True)[-1]
    ar = group_entries(pending, "0")[-1]
    assert recv["op"] == "recv" and recv["p2p_seq"] == 2 and recv["state"] == "started", recv
    assert recv["time_ended_ns"] is None and recv["duration_ms"] is None
    assert ar["collective_seq"] == 5 and ar["state"] == "scheduled", ar
    assert ar["time_started_ns"] is None

    # afterwards both completed, and the allreduce started when the receive completed
    after = results[1]["after"]
    recv = group_entries(after, "0", p2p=True)[-1]
    ar = [e for e in group_entries(after, "0") if e["collective_seq"] == 5][0]
    assert recv["state"] == ar["state"] == "completed"
    assert ar["time_started_ns"] >= recv["time_ended_ns"] >= recv["time_started_ns"]
    assert [e["collective_seq"] for e in group_entries(after, "0")] == [1, 2, 3, 4, 5, 6]
    # the same collective has the same number on both ranks
    sig = [[(e["collective_seq"], e["op"]) for e in group_entries(r["after"], "0")]
           for r in results]
    assert sig[0] == sig[1]


@pytest.mark.timeout(150)
def test_skipped_collective_every_rank_dumps_and_the_analyser_names_the_rank_behind(trace_dir):
    results = run_world(w.skip_collective, 3, timeout=120, pg_timeout_s=3)
    for rank in (0, 2):
        r = results[rank]
        assert r["raised"] and r["type"] == "DistBackendError", r
    dumps = {r: load(trace_dir, r) for r in range(3)}  # every rank wrote one, unasked
    for rank in (0, 2):
        reason = dumps[rank]["reason"]
        assert reason.startswith(("timeout:", "failure:")), reason
        (third,) = [e for e in group_entries(dumps[rank], "0") if e["collective_seq"] == 3]
        assert third["op"] == "allreduce" and third["state"] in ("timed_out", "failed"), third
        assert third["error"] and "xccl allreduce" in third["error"]
    assert dumps[1]["reason"].startswith("asked by a peer: rank "), dumps[1]["reason"]
    assert [e["collective_seq"] for e in group_entries(dumps[1], "0")] == [1, 2]
    assert any(e["state"] == "timed_out" for r in (0, 2) for e in group_entries(dumps[r], "0"))

    status, text, report = analyse(trace_dir)
    assert status == 1, text
    (g,) = report["groups"]
    assert g["last_completed_by_all"] == 2 and g["first_incomplete"] == 3, g
    assert g["status"]["1"] == "not_issued", g
    assert {g["status"]["0"], g["status"]["2"]} <= {"timed_out", "failed"}, g
    assert report["missing_dumps"] == []
    assert "verdict: rank 1 is behind: never issued collective #3 allreduce(float32, [8])" in text
    assert "rank 1: not issued: behind (its last: #2 broadcast(float32, [8]), completed)" in text


@pytest.mark.timeout(120)
def test_sigusr1_dumps_a_running_job(trace_dir):
    results = run_world(w.sigusr1, 2, timeout=90, trace_dir=str(trace_dir))
    assert results[0]["found"], results
    d = load(trace_dir, 0)
    assert d["reason"] == "SIGUSR1" and d["pid"] == results[0]["pid"]
    assert len(group_entries(d, "0")) >= 2
    assert not os.path.exists(os.path.join(trace_dir, "rank_1.json"))  # only the signalled one


@pytest.mark.timeout(120)
def test_dump_flight_record_on_demand_and_a_healthy_job_passes(trace_dir, tmp_path):
    explicit = tmp_path / "mine"
    explicit.mkdir()
    results = run_world(w.on_demand, 2, timeout=90, trace_dir=str(trace_dir),
                        explicit_dir=str(explicit))
    for rank, r in enumerate(results):
        assert r["default"] == r["expected_default"], r
        assert r["explicit"] == os.path.join(str(explicit), f"rank_{rank}.json")
        on_disk = load(explicit, rank)
        assert on_disk["reason"] == "torch_xccl.dump_flight_record()"
        assert [e["id"] for e in on_disk["entries"]] == [e["id"] for e in r["record"]["entries"]]
        ops = [e["op"] for e in group_entries(on_disk, "0")]
        assert ops == ["allreduce"] * 5 + ["_allgather_base", "barrier"], ops
    status, text, report = analyse(trace_dir)
    assert status == 0, text
    assert "every rank with a dump completed collectives #1..#7" in text, text
    assert "no problem found" in text and not report["problem"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["kind", "count"])
def test_mismatched_collectives_are_reported(trace_dir, case):
    results = run_world(w.mismatch, 2, timeout=90, pg_timeout_s=30, case=case)
    assert all(r["raised"] for r in results), results
    status, text, report = analyse(trace_dir)
    assert status == 1, text
    (g,) = report["groups"]
    (m,) = g["mismatches"]
    assert m["seq"] == 2
    calls = {tuple(c["ranks"]): c["call"] for c in m["calls"]}
    assert calls[(0,)] == "allreduce(float32, [16])", calls
    assert calls[(1,)] == ("broadcast(float32, [16])" if case == "kind"
                           else "allreduce(float32, [17])"), calls
    assert "verdict: ranks disagree at collective #2: rank 0 allreduce(float32, [16]); rank 1" \
        in text, text


@pytest.mark.timeout(120)
def test_a_rank_that_died_is_reported_as_missing(trace_dir):
    results = run_world(w.dies, 3, timeout=90, pg_timeout_s=30, allow_exit=(2,), victim=2)
    assert results[0]["raised"] and results[1]["raised"], results
    assert not os.path.exists(os.path.join(trace_dir, "rank_2.json"))
    status, text, report = analyse(trace_dir)
    assert status == 1, text
    assert report["missing_dumps"] == [2], report
    (g,) = report["groups"]
    assert g["status"]["2"] == "no_dump" and g["first_incomplete"] == 2, g
    assert "rank 2: no dump (died, or could not write one)" in text
    assert "rank 2 left no dump (died?)" in text, text


@pytest.mark.timeout(90)
def test_buffer_size_zero_disables_and_a_small_buffer_keeps_the_newest(monkeypatch, trace_dir):
    monkeypatch.setenv("TORCH_XCCL_TRACE_BUFFER_SIZE", "0")
    (rec,) = run_world(w.disabled, 1, timeout=60)
    assert rec["entries"] == [] and rec["buffer_size"] == 0
    monkeypatch.setenv("TORCH_XCCL_TRACE_BUFFER_SIZE", "3")
    (rec,) = run_world(w.small_buffer, 1, timeout=60)
    assert rec["buffer_size"] == 3 and rec["recorded"] == 7
    assert [e["collective_seq"] for e in rec["entries"]] == [5, 6, 7]


@pytest.mark.timeout(120)
def test_xdev_and_cpu_collectives_of_a_group_share_one_numbering(trace_dir):
    results = run_world(w.on_xdev, 2, timeout=90)
    for rank, rec in enumerate(results):
        coll = group_entries(rec, "0")
        assert [e["collective_seq"] for e in coll] == [1, 2, 3], coll
        assert [e["device"] for e in coll] == ["cpu", f"xdev:{rank % 2}", "cpu"], coll
        assert all(e["state"] == "completed" for e in coll), coll
        assert coll[1]["input_sizes"] == [[8]]


def _entry(seq, state, op="allreduce", p2p=False, t0=1_000_000_000):
    started = t0 if state != "scheduled" else None
    ended = t0 + 5_000_000 if state in ("completed", "failed", "timed_out") else None
    return {"id": seq, "group": "0", "group_rank": 0, "op": op, "is_p2p": p2p,
            "collective_seq": 0 if p2p else seq, "p2p_seq": seq if p2p else 0, "op_seq": seq,
            "device": "cpu", "state": state, "input_sizes": [[4]], "input_dtypes": ["float32"],
            "output_sizes": [[4]], "output_dtypes": ["float32"], "time_enqueued_ns": t0,
            "time_started_ns": started, "time_ended_ns": ended, "queued_ms": 0.0,
            "duration_ms": 5.0 if ended else None, "timeout_ms": 600000, "error": None}


def _write_dump(d, rank, entries, world=2):
    d.mkdir(exist_ok=True)
    dump = {"version": "1.0", "rank": rank, "world_size": world, "pid": 100 + rank,
            "hostname": "h", "reason": "SIGUSR1", "time_ns": 61_000_000_000,
            "buffer_size": 2000, "recorded": len(entries),
            "groups": [{"name": "0", "rank": rank, "size": world, "ranks": list(range(world))}],
            "entries": entries}
    (d / f"rank_{rank}.json").write_text(json.dumps(dump))


@pytest.mark.timeout(120)
def test_analyser_verdicts_on_written_dumps(tmp_path):
    # every rank inside #2 for a minute: stuck in the collective itself; a pending send
    stuck = tmp_path / "stuck"
    _write_dump(stuck, 0, [_entry(1, "completed"), _entry(2, "started")])
    _write_dump(stuck, 1, [_entry(1, "completed"), _entry(2, "started"),
                           _entry(1, "started", op="send", p2p=True)])
    status, text, report = analyse(stuck)
    assert status == 1, text
    assert "verdict: collective #2 allreduce(float32, [4]) issued by every rank and not " \
           "completed on ranks 0, 1: stuck inside the collective" in text, text
    assert "rank 0: in progress for 60.0 s when dumped" in text, text
    assert "pending point-to-point: rank 1 send (p2p #1)" in text, text
    # everything completed, one rank ahead: nothing wrong (dumps taken at different moments)
    skew = tmp_path / "skew"
    _write_dump(skew, 0, [_entry(1, "completed"), _entry(2, "completed")])
    _write_dump(skew, 1, [_entry(1, "completed")])
    status, text, report = analyse(skew)
    assert status == 0 and "rank 0 issued up to #2, others fewer" in text, text
    # no dump at all
    empty = tmp_path / "empty"
    empty.mkdir()
    status, text, report = analyse(empty)
    assert status == 2 and "no flight-recorder dump" in text, text
