"""XCCL_CHECKSUM=1 through torch: results are unchanged, and a bit flipped in flight
(XCCL_CHECKSUM_FLIP, tests only) fails the collective on every rank, naming the link,
instead of handing back a wrong sum; on xdev the stream fails, so nothing reads the output
(docs/RELIABILITY.md, "Payload checksums")."""

import pytest

import workers_checksum as w
from harness import run_world


@pytest.mark.timeout(120)
@pytest.mark.parametrize("device", ["cpu", "xdev"])
def test_checksummed_results_are_right_and_a_flip_fails_every_rank(monkeypatch, device):
    kw = {"device_id": "xdev"} if device == "xdev" else {}
    monkeypatch.setenv("XCCL_CHECKSUM", "1")
    want = float((1 << 18) * (1 + 2 + 3))
    for r in run_world(w.allreduce_outcome, 3, timeout=100, device=device, **kw):
        assert r == {"sum": want, "error": None}, r
    monkeypatch.setenv("XCCL_CHECKSUM_FLIP", "2")
    results = run_world(w.allreduce_outcome, 3, timeout=100, device=device, **kw)
    for r in results:
        assert r["sum"] is None and "DistBackendError" in r["error"], r
        # A rank not yet connected to the one that caught it (pairs connect on first use)
        # may learn only that it closed its communicator, or, when that rank has already
        # exited, that it died before the pair was needed; no rank returns a sum.
        assert (
            "failed its checksum" in r["error"]
            or "closed its communicator" in r["error"]
            or "before this rank first needed the pair" in r["error"]
        ), r
    assert any("over SHM failed its checksum" in r["error"] for r in results), results
    # Every pair connected at creation: the reason reaches every rank.
    monkeypatch.setenv("XCCL_RUNTIME_CONNECT", "0")
    for r in run_world(w.allreduce_outcome, 3, timeout=100, device=device, **kw):
        assert r["sum"] is None and "failed its checksum" in r["error"], r


@pytest.mark.timeout(120)
def test_the_future_of_a_work_that_failed_on_the_caller_carries_its_error(monkeypatch):
    # A host Work makes its future only when asked (most are waited for and dropped): asked
    # after the Work settled, the future is born with the outcome, an error included.
    monkeypatch.setenv("XCCL_CHECKSUM", "1")
    monkeypatch.setenv("XCCL_RUNTIME_CONNECT", "0")
    monkeypatch.setenv("TORCH_XCCL_ASYNC_ERROR_HANDLING", "0")
    want = float((1 << 18) * (1 + 2 + 3))
    for r in run_world(w.future_of_a_work_done_on_the_caller, 3, timeout=100):
        assert r == {"at": None, "done": True, "fut_done": True, "sum": want}, r
    monkeypatch.setenv("XCCL_CHECKSUM_FLIP", "2")
    for r in run_world(w.future_of_a_work_done_on_the_caller, 3, timeout=100):
        assert r["at"] == "future" and r["done"] and r["fut_done"], r
        assert "failed its checksum" in r["error"], r
