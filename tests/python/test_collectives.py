"""Every collective x dtype x op on 1-4 real ranks, against expected values and Gloo."""
import pytest

import workers_collectives
from harness import run_world


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_collective_matrix(world):
    results = run_world(workers_collectives.matrix, world, timeout=200)
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:50])
    assert all(r["checks"] > 150 for r in results), [r["checks"] for r in results]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world,staged", [(2, False), (3, False), (3, True)],
                         ids=["2", "3", "3-staged"])
def test_collective_matrix_on_xdev(world, staged, monkeypatch):
    """The same matrix on xdev tensors: stream-ordered communicators, ranks on distinct
    devices (2 ranks) and two ranks sharing one device (3 ranks: xdev:0, xdev:1, xdev:0).
    Staged: every operation through host copies of its buffers (XCCL_XDEV_STAGING=1, the CUDA
    device's default path), uneven all_gather and reduce_scatter and all_to_all included."""
    if staged:
        monkeypatch.setenv("XCCL_XDEV_STAGING", "1")
    results = run_world(workers_collectives.matrix, world, timeout=260, device="xdev")
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:50])
    assert all(r["checks"] > 150 for r in results), [r["checks"] for r in results]
