"""torch's symmetric memory on xdev with backend xccl: symm_mem.empty / rendezvous, peer
buffers and signal pads, put/wait/barrier, and torch.ops.symm_mem's one-shot and two-shot
allreduces (docs/MEMORY.md, "torch symmetric memory on xdev")."""
import pytest

import workers_symmetric_memory as w
from harness import run_world


@pytest.mark.timeout(120)
def test_peer_buffers_and_signals_carry_writes_between_ranks():
    results = run_world(w.peers_and_signals, 3, timeout=110, device_id="xdev")
    for rank, r in enumerate(results):
        assert r["backend"] == "XCCL", r
        assert (r["rank"], r["world"], r["size"]) == (rank, 3, 4096 * 4), r
        assert r["same"] and r["ptrs"] == 3, r
        assert r["seen"] == [[100, 100], [101, 101], [102, 102]], r
        assert r["pads_zero"], r  # every signal consumed: the pads are zero again


@pytest.mark.timeout(240)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
def test_one_and_two_shot_allreduce_equal_the_rank_order_fold_bit_for_bit(dtype):
    results = run_world(w.reductions, 3, timeout=230, device_id="xdev", dtype_name=dtype)
    for r in results:
        wrong = sorted(k for k, ok in r.items() if not ok)
        assert not wrong, wrong
        assert len(r) >= 4 * 3 * 5, len(r)


@pytest.mark.timeout(90)
def test_one_shot_output_inside_the_symmetric_buffer_is_folded_aside():
    for r in run_world(w.one_shot_into_its_own_buffer, 2, timeout=80, device_id="xdev"):
        assert r == {"second_half": [3.0], "first_half": [3.0]}, r


@pytest.mark.timeout(60)
def test_memset32_and_stream_write_value32_store_on_the_stream():
    r = run_world(w.stores, 1, timeout=50, device_id="xdev")[0]
    assert r["values"] == [0, 0, 7, 7, 7, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0], r
    assert "lies outside 16 elements" in r["bad"], r


@pytest.mark.timeout(90)
def test_bad_input_is_refused_with_the_reason():
    results = run_world(w.bad_input, 2, timeout=80, device_id="xdev")
    for rank, r in enumerate(results):
        assert "not in symmetric memory" in r["plain"], r
        assert 'reduce_op "prod" is not supported' in r["op"], r
        assert "every rank allocates the same size" in r["sizes"], r
        assert "1024 at offset" in r["sizes"] or "has 1024 bytes" in r["sizes"], r
        assert "does not fit a signal pad" in r["channel"], r
        assert "is not in a group of 2" in r["peer"], r
    assert "waiting for rank 1's signal on channel 3" in results[0]["timeout"], results[0]
    assert "no signal after 300 ms" in results[0]["timeout"], results[0]


@pytest.mark.timeout(90)
def test_a_wait_for_a_peer_that_exited_fails_naming_it():
    r = run_world(w.peer_exits_while_awaited, 2, timeout=80, device_id="xdev",
                  allow_exit=(1,))[0]
    assert "waiting for rank 1's signal" in r["error"] and "exited" in r["error"], r
    assert r["seconds"] < 10, r


@pytest.mark.timeout(90)
def test_reduce_scatter_out_splits_rows_or_columns_as_cuda_does():
    for r in run_world(w.reduce_scatter, 3, timeout=80, device_id="xdev"):
        assert r["rows"] and r["cols"], r
        assert "(5) does not divide by the group's 3 ranks" in r["uneven"], r


@pytest.mark.timeout(120)
def test_a_wait_for_a_peer_whose_own_wait_failed_ends_at_once():
    r0, r1 = run_world(w.a_failed_peer_is_not_waited_for, 3, timeout=100, device_id="xdev",
                       allow_exit=(2,))[:2]
    assert "waiting for rank 2's signal" in r1["error"] and "exited" in r1["error"], r1
    assert "waiting for rank 1's signal" in r0["error"], r0
    assert "that rank's operation on this memory failed" in r0["error"], r0
    assert r0["seconds"] < 10, r0  # not the 600 s timeout


@pytest.mark.timeout(120)
def test_tile_reduce_and_multi_root_tile_reduce_equal_the_cpu_fold():
    for rank, r in enumerate(run_world(w.tiles, 3, timeout=110, device_id="xdev")):
        assert r["rows"] and r["multi"], r
        assert r.get("strided_max", rank != 0) and r.get("aside", rank != 2), r
        assert "is the root of tiles 0 and 1" in r["twice"], r
        assert "root 3 is not a rank of group" in r["root"], r
        assert "out_tile must be a Float tile of [2, 10]" in r["shape"], r
        assert "in_tile must be 2-D, got 1 dimensions" in r["dims"], r


@pytest.mark.timeout(120)
def test_multimem_ops_and_get_remote_tensors_give_the_folds_and_the_peers_values():
    for r in run_world(w.multimem_and_remote, 3, timeout=110, device_id="xdev"):
        assert r == {"one_shot": True, "reduce_out": True, "all_gather": True,
                     "remote": [True, True, True], "all_reduce_": True}, r


@pytest.mark.timeout(120)
def test_all_to_all_vdev_dispatch_and_combine_move_rows_where_the_splits_say():
    for r in run_world(w.shuffles, 3, timeout=110, device_id="xdev"):
        assert r["1d"] and r["2d"] and r["combine"], r
        assert "into an out of 1 rows" in r["small"], r
