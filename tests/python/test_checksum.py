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
        assert "failed its checksum" in r["error"], r
    assert any("over SHM failed its checksum" in r["error"] for r in results), results
