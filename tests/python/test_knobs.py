"""TORCH_XCCL_BLOCKING_WAIT and TORCH_XCCL_ASYNC_ERROR_HANDLING."""
import os

import pytest

import workers_misc
from harness import WorldFailed, run_world


@pytest.fixture
def env(monkeypatch):
    def set_(**kv):
        for k, v in kv.items():
            monkeypatch.setenv(k, v)  # spawned children inherit the parent's environment
    return set_


@pytest.mark.timeout(90)
def test_blocking_wait_timeout_aborts_group(env):
    env(TORCH_XCCL_BLOCKING_WAIT="1", TORCH_XCCL_ASYNC_ERROR_HANDLING="0")
    r0, r1 = run_world(workers_misc.wait_timeout, 2, timeout=80, pg_timeout_s=60)
    assert "blocking_wait=1, async_error_handling=0" in r0["describe"]
    assert r0["wait"] is None, r0
    assert 1.5 < r0["elapsed"] < 10, r0
    assert r0["later"] is None, r0
    assert r1["peer"] is None, r1  # failed (did not hang) once rank 0 aborted
    assert r1["elapsed"] < 30, r1


@pytest.mark.timeout(120)
def test_async_error_handling_teardown(env):
    env(TORCH_XCCL_ASYNC_ERROR_HANDLING="1")
    with pytest.raises(WorldFailed, match=r"rank\(s\) \[0\] exited"):
        run_world(workers_misc.teardown, 2, timeout=100, pg_timeout_s=20, allow_exit=(1,))
