"""Topology end to end: the xccl-topo command, a topology file steering a real job's ring,
a file that does not fit failing creation with the reason, and hierarchical allreduce chosen
(and correct) across two hosts made of network namespaces. Real processes, hard timeouts."""
import os
import re
import subprocess
import sys

import pytest

import netns
from harness import REPO, communicate_all, free_port

EXAMPLES = os.path.join(REPO, "tools", "xccl-topo", "examples")


def topo(*args, **kw):
    return subprocess.run(["xccl-topo", *args], capture_output=True, text=True, timeout=60, **kw)


@pytest.mark.timeout(120)
def test_xccl_topo_command(tmp_path):
    r = topo("-d", "xdev", env=dict(os.environ, XCCL_XDEV_COUNT="8"))
    assert r.returncode == 0, r.stderr
    assert re.search(r"^D0\s+X\s+XL\s+XL\s+XL\s+PHB", r.stdout, re.M), r.stdout
    assert "Legend:" in r.stdout and "NIC0:" in r.stdout, r.stdout
    dump = tmp_path / "this.topo"
    r = topo("--dump", "-d", "xdev", "-o", str(dump))
    assert r.returncode == 0, r.stderr
    r = topo("matrix", "--topo-file", str(dump))
    assert r.returncode == 0 and "D7" in r.stdout, r.stdout + r.stderr
    r = topo("rings", "--topo-file", os.path.join(EXAMPLES, "two-hosts-8-devices.topo"),
             "--nranks", "16")
    assert r.returncode == 0, r.stderr
    assert "ring 0: 0 1 2 3 4 5 6 7 | 8 9 10 11 12 13 14 15" in r.stdout, r.stdout
    assert re.search(r"64 MiB\s+hierarchical", r.stdout), r.stdout
    page = tmp_path / "topo.html"
    r = topo("show", "--topo-file", os.path.join(EXAMPLES, "three-hosts-asymmetric.topo"),
             "--nranks", "10", "--ranks-per-host", "4", "--html", str(page))
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "<script" not in html
    bad = tmp_path / "bad.topo"
    bad.write_text("host a\ndevices 2\nlink 0 1 WARP 9\n")
    r = topo("matrix", "--topo-file", str(bad))
    assert r.returncode == 2 and "line 3: unknown link kind 'WARP'" in r.stderr, r.stderr


JOB = r"""
import os, sys, torch, torch.distributed as dist, torch_xccl
rank = int(os.environ["RANK"])
torch.xdev.set_device(rank)
try:
    dist.init_process_group("xccl", device_id=torch.device("xdev", rank))
    t = torch.full((1000,), float(rank + 1), device=f"xdev:{rank}")
    dist.all_reduce(t)
    assert t.cpu().tolist() == [10.0] * 1000, t[:4]
    print("OK", flush=True)
    dist.destroy_process_group()
except Exception as e:
    print(f"ERROR {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
"""


def run_job(env_extra, timeout=150):
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", JOB], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=port, OMP_NUM_THREADS="1", **env_extra))
             for r in range(4)]
    return communicate_all(procs, timeout)


@pytest.mark.timeout(200)
def test_topology_file_steers_the_ring(tmp_path):
    """Only 0-2-1-3 is XL all the way round: the xdev communicator's ring follows the file."""
    f = tmp_path / "square.topo"
    f.write_text("system xdev\nhost box\ndevices 4\n"
                 "link 0 2 XL 100\nlink 2 1 XL 100\nlink 1 3 XL 100\nlink 3 0 XL 100\n")
    outs = run_job({"XCCL_TOPO_FILE": str(f), "XCCL_DEBUG": "INFO", "XCCL_DEBUG_SUBSYS": "INIT"})
    text = "".join(o for _, o in outs)
    assert all(rc == 0 for rc, _ in outs), text[-4000:]
    assert re.search(r"topology XCCL_TOPO_FILE=\S+square.topo, ring 0 2 1 3", text), text[-4000:]


@pytest.mark.timeout(200)
def test_a_topology_file_that_does_not_fit_is_named(tmp_path):
    f = tmp_path / "small.topo"
    f.write_text("system xdev\nhost box\ndevices 2\n")  # ranks 2 and 3 use devices it lacks
    outs = run_job({"XCCL_TOPO_FILE": str(f)})
    for rc, text in outs:
        assert rc == 3, text
    text = "".join(o for _, o in outs)
    assert "has 2 device(s), rank 2 runs on device 2" in text, text[-3000:]


HIER = r"""
import os, torch, torch.distributed as dist, torch_xccl
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("xccl")
for n in (1 << 20, 1 << 10):  # 4 MiB (hierarchical), 4 KiB (direct)
    t = torch.arange(n, dtype=torch.float32) + rank
    dist.all_reduce(t)
    want = torch.arange(n, dtype=torch.float32) * world + sum(range(world))
    assert torch.equal(t, want), (n, t[:4], want[:4])
print("CHECKED", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.skipif(bool(netns.available()), reason=netns.available() or "ok")
@pytest.mark.timeout(240)
def test_hierarchical_allreduce_across_namespace_hosts():
    with netns.hosts(2, tag="T") as hs:
        procs = []
        for r in range(4):
            h = hs[r // 2]
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="4", MASTER_ADDR=hs[0].addr,
                       MASTER_PORT="29733", OMP_NUM_THREADS="1", XCCL_DEBUG="INFO",
                       XCCL_DEBUG_SUBSYS="INIT,COLL")
            env.pop("XCCL_NODE_ID", None)
            procs.append(h.popen([sys.executable, "-c", HIER], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, env=env))
        outs = communicate_all(procs, 200)
    text = "\n".join(o for _, o in outs)
    assert all(rc == 0 for rc, _ in outs), text[-5000:]
    assert text.count("CHECKED") == 4, text[-3000:]
    assert "topology detected" in text, text[-3000:]
    assert re.search(r"allreduce of 4194304 bytes on 2 host\(s\) of 2/2 rank\(s\): algorithm "
                     r"hierarchical", text), text[-4000:]
