"""xdev beside CPU-only programs (issue 33, root cause B; docs/XDEV_TORCH.md, "xdev beside
CPU-only programs").

Installing torch_xccl registers xdev at `import torch` on every machine. A program that never
uses xdev must keep torch's CPU behaviour exactly (init_process_group() -> gloo, the same
numbers, the same warnings); a program that uses xdev gets xdev as torch's accelerator and
init_process_group() -> xccl.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from harness import free_port, run_world
from xdev_util import ROOT, fake_install

import workers_xdev

# An ordinary CPU training script written for torch alone (world of one, as a laptop run).
CPU_SCRIPT = textwrap.dedent(r"""
    import json, sys, warnings
    import torch, torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def caught(fn):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = fn()
        return r, sorted({str(x.message).splitlines()[0] for x in w})

    out = {"available": torch.accelerator.is_available(),
           "checked": str(torch.accelerator.current_accelerator(check_available=True)),
           "get_accelerator": str(torch._C._get_accelerator())}
    dist.init_process_group(init_method=sys.argv[1], rank=0, world_size=1)
    out["backend"] = dist.get_backend()  # torch 2.13 says "undefined" (lazy), as without us
    out["cpu_backend"] = type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__
    t = torch.arange(4.0)
    dist.all_reduce(t)
    out["all_reduce"] = t.tolist()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ds = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    batches, out["loader_warnings"] = caught(
        lambda: list(torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True)))
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item().hex())
    out["losses"] = losses
    out["pinned"] = batches[0][0].is_pinned()
    out["default_device"] = str(torch.get_default_device())
    dist.destroy_process_group()
    out["torch_xccl_loaded"] = "torch_xccl" in sys.modules
    print("RESULT " + json.dumps(out, sort_keys=True))
""")


def _env(pythonpath, env_extra=None):
    env = dict(os.environ)
    env.pop("TORCH_XCCL_ACCELERATOR", None)
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    env.update(env_extra or {})
    return env


def _result(returncode, stdout, stderr):
    assert returncode == 0, stderr
    line = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def _run(code, pythonpath, env_extra=None, args=()):
    p = subprocess.run([sys.executable, "-c", code, *args], env=_env(pythonpath, env_extra),
                       capture_output=True, text=True, timeout=120, cwd="/")
    return _result(p.returncode, p.stdout, p.stderr)


def _run_many(jobs, pythonpath=(ROOT,), timeout=150):
    """Each (code, env_extra[, args]) in a fresh interpreter, all at once; their results in
    order."""
    procs = [subprocess.Popen([sys.executable, "-c", job[0], *(job[2] if len(job) > 2 else ())],
                              env=_env(list(pythonpath), job[1]), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd="/") for job in jobs]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    return [_result(p.returncode, o, e) for p, (o, e) in zip(procs, outs)]


@pytest.mark.timeout(300)
def test_unchanged_cpu_script_behaves_exactly_as_without_torch_xccl(tmp_path):
    installed = fake_install(tmp_path)  # the torch.backends entry point, as pip writes it
    runs = [(CPU_SCRIPT, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}), (CPU_SCRIPT, {}),
            ("import torch_xccl\n" + CPU_SCRIPT, {})]
    without, with_, explicit = _run_many(
        [(code, env, [f"tcp://127.0.0.1:{free_port()}"]) for code, env in runs], installed)
    assert without.pop("torch_xccl_loaded") is False
    assert with_.pop("torch_xccl_loaded") is True and explicit.pop("torch_xccl_loaded") is True
    assert without["cpu_backend"] == "ProcessGroupGloo" and without["available"] is False
    assert with_ == without
    # importing torch_xccl (for the xccl backend on cpu tensors, say) is not using xdev either
    assert explicit == without


CLAIM = textwrap.dedent("""
    import torch, torch_xccl
    before = (torch.accelerator.is_available(), torch.xdev.is_available(),
              str(torch._C._get_accelerator()), torch.xdev.device_count())
    {use}
    after = (torch.accelerator.is_available(), torch.xdev.is_available(),
             str(torch._C._get_accelerator()))
    print("RESULT", __import__("json").dumps([before, after]))
""")


USES = [
    "torch.ones(2, device='xdev')",
    "torch.nn.Linear(2, 2).to('xdev:1')",
    "torch.xdev.set_device(1)",
    "torch.xdev.init()",
    "torch.Stream(device='xdev')",
    # torch initialises the accelerator for this (its lazy init, as for CUDA)
    "torch.accelerator.current_device_index()",
]
# what a CPU-only program (or a tool looking around) may call: none of it is using xdev
QUERIES = "; ".join([
    "torch.accelerator.is_available()", "torch.accelerator.current_accelerator()",
    "torch.accelerator.device_count()", "torch.manual_seed(3)", "torch.randn(2)",
    "torch.xdev.device_count()", "torch.xdev.current_device()", "torch.xdev.memory_allocated()",
    "torch.xdev.get_device_name()", "torch.xdev.is_bf16_supported()",
    "torch.xdev.is_available()", "torch.xdev.is_initialized()",
])


@pytest.mark.timeout(300)
def test_what_makes_xdev_the_accelerator_and_what_does_not():
    jobs = [(CLAIM.format(use=use), {}) for use in USES]
    jobs.append((CLAIM.format(use=QUERIES), {}))
    jobs.append((CLAIM.format(use="pass"), {"TORCH_XCCL_ACCELERATOR": "xdev"}))
    *uses, queries, env = _run_many(jobs)
    for use, (before, after) in zip(USES, uses):
        assert before == [False, False, "cpu", 8], use
        assert after == [True, True, "xdev"], use  # the first use claims it
    before, after = queries
    assert after == before[:3] == [False, False, "cpu"]
    assert env[0][:3] == [True, True, "xdev"]  # TORCH_XCCL_ACCELERATOR=xdev: from the start


@pytest.mark.timeout(200)
def test_a_forked_child_cannot_initialise_xdev():
    code = textwrap.dedent("""
        import multiprocessing as mp, torch, torch_xccl
        torch.xdev.init()
        def child(q):
            try:
                torch.xdev.init()
                q.put("no error")
            except RuntimeError as e:
                q.put(str(e))
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start(); p.join(60)
        print("RESULT", __import__("json").dumps(q.get(timeout=5)))
    """)
    msg = _run(code, [ROOT])
    assert msg.startswith("Cannot re-initialize xdev in forked subprocess. To use xdev with "
                          "multiprocessing, you must use the 'spawn' start method"), msg


@pytest.mark.timeout(240)
@pytest.mark.parametrize("select,env", [("set_device", False), ("none", True), ("mesh", True)])
def test_init_process_group_without_backend_on_xdev_is_xccl(select, env, monkeypatch):
    """set_device: the script selects its xdev device, then init_process_group().
    none + env: TORCH_XCCL_ACCELERATOR=xdev and nothing else (an unchanged generic script).
    mesh + env: init_device_mesh("xdev", ...) alone; torch makes the default group in it
    before it looks at the device, from the accelerator, so that needs xdev to be this
    process's accelerator already (docs/XDEV_TORCH.md)."""
    if env:
        monkeypatch.setenv("TORCH_XCCL_ACCELERATOR", "xdev")
    else:
        monkeypatch.delenv("TORCH_XCCL_ACCELERATOR", raising=False)
    results = run_world(workers_xdev.default_backend_on_xdev, 2, timeout=200, init=False,
                        port=free_port(), select=select)
    for r in results:
        assert r["available_before"] is env, r
        assert r["accelerator"] == "xdev" and r["xccl"], r  # torch's pick for xdev: xccl
        assert r["sum"] == [3.0, 3.0, 3.0], r
        assert r.get("mesh_device", "xdev") == "xdev", r


# A torch built for a GPU: torch makes a registered PrivateUse1 device its accelerator ahead of
# CUDA, and init_process_group(device_id=cuda:0) then refused the GPU in every process that had
# merely installed torch_xccl (H100, 2026-11-27). There xdev is registered only when asked for.
# This machine's torch is CPU-only, so the script tells torch_xccl that torch was built for
# CUDA (torch.backends.cuda.is_built, which is what it asks) before the import.
GPU_TORCH_SCRIPT = textwrap.dedent(r"""
    import json, os
    import torch
    torch.backends.cuda.is_built = lambda: True
    import torch_xccl, torch.distributed as dist
    out = {"name": torch._C._get_privateuse1_backend_name(),
           "accelerator": str(torch.accelerator.current_accelerator()),
           "torch_xdev": hasattr(torch, "xdev"), "registered": torch_xccl.xdev.registered()}
    dist.init_process_group("xccl", rank=0, world_size=1, store=dist.HashStore())
    out["config"] = str(dist.get_backend_config())
    t = torch.arange(4.0)
    dist.all_reduce(t)
    out["all_reduce"] = t.tolist()
    dist.destroy_process_group()
    print("RESULT " + json.dumps(out, sort_keys=True))
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("asked", [False, True], ids=["default", "asked"])
def test_a_torch_built_for_a_gpu_keeps_its_accelerator(asked):
    env = _env([ROOT], {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    if asked:
        env["TORCH_XCCL_ACCELERATOR"] = "xdev"
    p = subprocess.run([sys.executable, "-c", GPU_TORCH_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=100)
    out = _result(p.returncode, p.stdout, p.stderr)
    assert out["all_reduce"] == [0.0, 1.0, 2.0, 3.0]
    if asked:  # the user's choice: xdev is the accelerator, the GPU's device_id is refused
        assert out["name"] == "xdev" and out["accelerator"] == "xdev" and out["registered"]
        assert out["config"] == "cpu:xccl,xdev:xccl,cuda:xccl"
    else:
        assert out["name"] == "privateuseone" and out["accelerator"] == "None"
        assert not out["torch_xdev"] and not out["registered"]
        assert out["config"] == "cpu:xccl,cuda:xccl"
