"""TORCH_XCCL_BLOCKING_WAIT and TORCH_XCCL_ASYNC_ERROR_HANDLING."""

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


BAD_KNOBS = [
    ("TORCH_XCCL_ASYNC_ERROR_HANDLING", "5", "not in range: expected an integer from 0 to 3"),
    ("TORCH_XCCL_BLOCKING_WAIT", "yes", "not an integer: expected an integer from 0 to 1"),
    ("TORCH_XCCL_RUN_ON_CALLER", "1x", "not an integer"),
    ("TORCH_XCCL_DESYNC_DEBUG", "2", "not in range"),
    ("TORCH_XCCL_STORE_CALL_TIMEOUT_MS", "0", "not in range"),
    ("TORCH_XCCL_TRACE_BUFFER_SIZE", "-1", "not in range"),
]


@pytest.mark.timeout(200)
def test_a_malformed_backend_knob_is_refused_naming_it():
    """One strict reader for every TORCH_XCCL_* integer knob: a typo or an out-of-range value
    is a ValueError at group creation that names the knob, never a silent 0 or default.

    One interpreter tries the cases in turn (those knobs are read at each group's creation);
    the flight recorder's buffer size is read once per process, so it gets its own."""
    import json
    import os
    import subprocess
    import sys
    import textwrap

    cases = [("TORCH_XCCL_ASYNC_ERROR_HANDLING", "3", None)] + BAD_KNOBS
    code = textwrap.dedent("""
        import datetime, json, os, sys, torch, torch.distributed as dist, torch_xccl
        sys.path.insert(0, sys.argv[2])
        from harness import free_port
        for name, value, _ in json.loads(sys.argv[1]):
            os.environ[name] = value
            try:
                dist.init_process_group("xccl", init_method=f"tcp://127.0.0.1:{free_port()}",
                                        rank=0, world_size=1,
                                        timeout=datetime.timedelta(seconds=20))
                t = torch.ones(2); dist.all_reduce(t)
                print(name, "ACCEPTED", flush=True)
            except ValueError as e:
                print(name, "REFUSED", e, flush=True)
            finally:
                del os.environ[name]
                if dist.is_initialized():
                    dist.destroy_process_group()
    """)
    once_per_process = {"TORCH_XCCL_TRACE_BUFFER_SIZE"}
    out = ""
    for part in ([c for c in cases if c[0] not in once_per_process],
                 [c for c in cases if c[0] in once_per_process]):
        p = subprocess.run([sys.executable, "-c", code, json.dumps(part),
                            os.path.dirname(os.path.abspath(__file__))],
                           capture_output=True, text=True, timeout=120)
        out += p.stdout + p.stderr
    assert "TORCH_XCCL_ASYNC_ERROR_HANDLING ACCEPTED" in out, out[-3000:]
    for name, value, why in BAD_KNOBS:
        assert f"{name} REFUSED xccl: {name}='{value}' is {why}" in out, (name, out[-3000:])
