"""torch_xccl.direct.all_reduce: the allreduce called straight into libxccl, with no Work
(docs/PLUGIN.md, "Direct calls"): right for every dtype and op, in order with the group's
other collectives, bad input refused on the calling rank with the group still usable, the
NaN check, the group's timeout, and a default group made again after destroy."""

import pytest
import torch

import workers_direct as w
from harness import run_world


@pytest.mark.timeout(180)
def test_every_dtype_and_op_on_plain_and_peer_memory_tensors_and_a_subgroup():
    for wrong in run_world(w.every_dtype_and_op, 3, timeout=160):
        assert wrong == [], wrong


@pytest.mark.timeout(120)
def test_direct_calls_meet_in_order_with_outstanding_async_collectives():
    assert run_world(w.in_order_with_the_groups_other_collectives, 2, timeout=100) == [True, True]


@pytest.mark.timeout(120)
def test_bad_input_is_refused_on_the_calling_rank_and_the_group_keeps_working():
    results = run_world(w.bad_input_is_refused_and_the_group_keeps_working, 3, timeout=100)
    for rank, got in enumerate(results):
        for case, text in got.items():
            assert "wrong sum" not in str(text), (rank, case, text)
        assert got["xdev"].startswith("ValueError") and "cpu tensors only" in got["xdev"], got
        assert got["strided"].startswith("ValueError") and "contiguous" in got["strided"], got
        assert got["premul"].startswith("ValueError") and "PREMUL_SUM" in got["premul"], got
        assert got["complex_max"].startswith("ValueError") and "complex" in got["complex_max"], got
        assert got["int16"].startswith("ValueError") and "unsupported dtype" in got["int16"], got
        assert "coalescing block" in got["coalescing"], got
        assert got["gloo"].startswith("ValueError") and "not xccl" in got["gloo"], got
        if rank == 0:
            assert got["not_member"].startswith("ValueError") and "not a member" in got[
                "not_member"], got
        else:
            assert got["members"] == [2.0, 2.0], got


@pytest.mark.timeout(120)
def test_the_nan_check_names_the_rank_that_fed_it(monkeypatch):
    monkeypatch.setenv("TORCH_XCCL_NAN_CHECK", "1")
    for r in run_world(w.nan_check_names_the_rank, 2, timeout=100):
        assert r.startswith("DistBackendError") and "rank 1" in r and "NaN" in r, r


@pytest.mark.timeout(120)
def test_a_peer_that_never_calls_fails_the_call_within_the_groups_timeout():
    got = run_world(w.a_peer_that_never_calls_times_out, 2, timeout=100, pg_timeout_s=3.0)
    text, seconds = got[0]
    assert text.startswith("DistBackendError"), text
    assert "direct all_reduce" in text and "rank 0" in text, text
    assert 2.0 <= seconds < 30.0, (seconds, text)


@pytest.mark.timeout(120)
def test_a_default_group_made_again_after_destroy_is_the_one_used(tmp_path):
    init_file = tmp_path / "init"
    for rank, r in enumerate(run_world(w.the_default_group_again_after_destroy, 2, timeout=100,
                                       init_file=str(init_file))):
        assert r["first"] == [2.0, 2.0], r
        assert r["between"] in ("ValueError", "DistBackendError"), r
        assert r["second"] == [1.0, 1.0], r


def test_the_module_is_exported():
    import torch_xccl

    assert torch_xccl.direct.all_reduce.__doc__
    with pytest.raises(ValueError, match="no default process group"):
        torch_xccl.direct.all_reduce(torch.ones(1))


@pytest.mark.timeout(120)
def test_other_python_threads_run_while_a_call_waits_for_a_late_peer():
    got = run_world(w.other_threads_run_while_a_call_waits, 2, timeout=100)
    assert got[0]["sum"] == [2.0, 2.0, 2.0] and got[1]["sum"] == [2.0, 2.0, 2.0], got
    # 0.5 s of waiting at 1 ms a count: far more than the few counts of a held GIL's switches
    assert got[0]["counted_during_call"] >= 50, got


@pytest.mark.timeout(120)
def test_another_groups_blocking_call_inside_a_coalescing_block_raises_not_unreduced():
    # The same per-thread check that refuses a direct call in a block guards dist.all_reduce.
    for r in run_world(w.another_groups_call_inside_a_coalescing_block, 2, timeout=100):
        assert "coalescing block of another group" in r["inside"], r
        assert r["b_after"] == [2.0] * 4 and r["a_after"] == [2.0] * 4, r
