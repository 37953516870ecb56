"""The job templates in launcher/, run the way each is run in its place, every one on a real
job (launcher/examples/hello_allreduce.py: init "xccl", all_reduce, check, one line per rank):

- launcher/slurm/train.sbatch: executed by bash under the variables Slurm gives a batch step,
  on the first of two hosts made of network namespaces; its `srun` is a stand-in written
  here that starts the step's command once per node, in that node's namespace, with the
  per-task variables srun sets (SLURM_NODEID, SLURM_PROCID, ...). Node names resolve through
  a hosts file in each namespace (/etc/netns/<ns>/hosts, which `ip netns exec` mounts).
- launcher/k8s/pytorchjob.yaml: checked against the PyTorchJob structure (schema file beside
  it, jsonschema), then each replica's container command run as a pod on its own namespace
  host, with the variables the Kubeflow training operator (v1) gives it and the master's
  service name resolving to the Master pod's host.
- launcher/mpi/run.sh: Open MPI's mpirun (openmpi-bin) on this host, and across two namespace
  hosts with mpirun's remote-start agent replaced by `ip netns exec` (no ssh).
- launcher/two_nodes.sh: the seed's torch.distributed.launch command on two namespace hosts.

Every process carries a hard timeout; processes a test started are found by a marker in their
environment and killed on the way out, so a hang fails the test and leaves nothing behind.
Namespace tests need root (skipped otherwise, as in test_xcclrun.py); mpirun tests skip
where Open MPI is not installed (scripts/setup.sh installs it).
"""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import uuid

import pytest
import yaml

import netns
from procs import finish, kill_marked
from harness import REPO, free_port

LAUNCHER = os.path.join(REPO, "launcher")
HELLO = re.compile(r"hello_allreduce rank (\d+)/(\d+) local (\d+)/(\d+) host \S+ sum (\S+) (ok|WRONG)")
NO_NETNS = netns.available()
NO_MPIRUN = "" if shutil.which("mpirun") else "mpirun not installed (apt-get install openmpi-bin)"


# ---------------------------------------------------------------- helpers

@contextlib.contextmanager
def marked():
    """A marker for this test's processes; they are killed on the way out."""
    marker = uuid.uuid4().hex
    try:
        yield marker
    finally:
        kill_marked("TEST_TEMPLATE_MARKER", marker)


def popen(cmd, env, cwd=REPO, host=None):
    """cmd on this host, or inside a namespace host; stdout and stderr together."""
    kw = dict(cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return host.popen(cmd, **kw) if host else subprocess.Popen(cmd, **kw)


def job_env(marker, **extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TEST_TEMPLATE_MARKER=marker)
    env.pop("XCCL_NODE_ID", None)  # the namespaces alone make separate hosts
    env.update(extra)
    return env


def check_hello(text, world):
    """Every rank 0..world-1 reported once, in a world of `world`, with the right sum."""
    found = HELLO.findall(text)
    assert sorted(int(r) for r, *_ in found) == list(range(world)), text[-5000:]
    assert all(int(w) == world and ok == "ok" for _, w, _, _, _, ok in found), text[-5000:]
    assert {float(s) for *_, s, _ in found} == {world * (world + 1) / 2}, text[-5000:]


def check_across(text, world, per_host, addr_of_host):
    """Ranks on one host met over SHM, ranks on different hosts over TCP to the peer host's
    address (XCCL_DEBUG=INFO, XCCL_DEBUG_SUBSYS=INIT lines)."""
    for r in range(world):
        for p in range(world):
            if p == r:
                continue
            via = "SHM" if p // per_host == r // per_host else \
                rf"TCP {re.escape(addr_of_host(p // per_host))}:"
            assert re.search(rf"rank {r} -> {p} via {via}", text), (r, p, via, text[-5000:])


@contextlib.contextmanager
def named_hosts(tag, names=()):
    """Two namespace hosts (10.231.0.1, 10.231.0.2 on one veth pair) where names[i] resolves
    to host i's address (a hosts file per namespace, which `ip netns exec` mounts over
    /etc/hosts). On the way out every process still inside them is killed (all started by
    this test) before the namespaces go."""
    with netns.two_hosts(tag) as hs:
        made = []
        try:
            if names:
                lines = ["127.0.0.1 localhost"] + [f"{h.addr} {n}" for h, n in zip(hs, names)]
                for h in hs:
                    d = os.path.join("/etc/netns", h.name)
                    os.makedirs(d)
                    made.append(d)
                    with open(os.path.join(d, "hosts"), "w") as f:
                        f.write("\n".join(lines) + "\n")
            yield hs
        finally:
            for h in hs:
                r = subprocess.run(["ip", "netns", "pids", h.name], capture_output=True, text=True,
                                   timeout=20)
                for pid in r.stdout.split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
            for d in made:
                shutil.rmtree(d, ignore_errors=True)


def template(*parts):
    return os.path.join(LAUNCHER, *parts)


# ---------------------------------------------------------------- files and their references

def test_templates_are_where_the_docs_say_and_parse():
    for rel in ["slurm/train.sbatch", "k8s/pytorchjob.yaml", "k8s/pytorchjob.schema.json",
                "mpi/run.sh", "two_nodes.sh", "README.md", "examples/hello_allreduce.py"]:
        assert os.path.isfile(template(rel)), rel
    for rel in ["slurm/train.sbatch", "mpi/run.sh", "two_nodes.sh"]:
        r = subprocess.run(["bash", "-n", template(rel)], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, (rel, r.stderr)
    for doc in ["docs/LAUNCH.md", "launcher/README.md"]:
        with open(os.path.join(REPO, doc)) as f:
            named = set(re.findall(r"(?<![\w/])launcher/[\w./-]+\w", f.read()))
        assert named, doc
        for rel in named:
            assert os.path.exists(os.path.join(REPO, rel)), (doc, rel)


@pytest.mark.timeout(30)
def test_two_nodes_refuses_a_bad_node_rank():
    r = subprocess.run(["bash", template("two_nodes.sh"), "2", "10.0.0.1"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 2 and "NODE_RANK must be 0 or 1" in r.stderr, r.stderr


# ---------------------------------------------------------------- Slurm

FAKE_SRUN = r'''#!/usr/bin/env python3
"""srun, as far as launcher/slurm/train.sbatch uses it, for tests: the step's command once
per node of SLURM_JOB_NODELIST (--ntasks-per-node=1), inside the node's network namespace
(TEST_SRUN_NETNS="node=namespace,..."), with the variables srun gives a task."""
import os, subprocess, sys, time
import hostlist

args = sys.argv[1:]
opts = {}
while args and args[0].startswith("-"):
    key, eq, value = args.pop(0).partition("=")
    if not eq and key not in ("--kill-on-bad-exit",):
        sys.exit(f"fake srun: option {key} needs the --opt=value form here")
    opts[key] = value or "1"
if opts.get("--ntasks-per-node", "1") != "1":
    sys.exit("fake srun: only --ntasks-per-node=1")
nodes = hostlist.expand_hostlist(os.environ["SLURM_JOB_NODELIST"])
where = dict(kv.split("=") for kv in os.environ["TEST_SRUN_NETNS"].split(","))
procs = []
for i, node in enumerate(nodes):
    env = dict(os.environ, SLURM_NODEID=str(i), SLURM_PROCID=str(i), SLURM_LOCALID="0",
               SLURM_STEP_ID="0", SLURM_STEPID="0", SLURM_STEP_NODELIST=os.environ["SLURM_JOB_NODELIST"],
               SLURM_STEP_NUM_NODES=str(len(nodes)), SLURM_STEP_NUM_TASKS=str(len(nodes)),
               SLURM_STEP_TASKS_PER_NODE=f"1(x{len(nodes)})", SLURM_NTASKS=str(len(nodes)),
               SLURM_TASKS_PER_NODE=f"1(x{len(nodes)})", SLURMD_NODENAME=node)
    procs.append(subprocess.Popen(["ip", "netns", "exec", where[node]] + args, env=env))
rcs = [None] * len(procs)
while None in rcs:
    for i, p in enumerate(procs):
        rcs[i] = p.poll()
    bad = [rc for rc in rcs if rc not in (None, 0)]
    if bad and "--kill-on-bad-exit" in opts:
        for p in procs:
            if p.poll() is None:
                p.kill()
        sys.exit(bad[0])
    time.sleep(0.1)
sys.exit(max(rcs))
'''


@pytest.mark.skipif(bool(NO_NETNS), reason=NO_NETNS or "ok")
@pytest.mark.timeout(200)
def test_sbatch_script_on_two_namespace_hosts(tmp_path):
    """bash runs train.sbatch as Slurm's batch step on node 1 (from another directory: the
    script goes to SLURM_SUBMIT_DIR), srun starts xcclrun on both nodes, xcclrun reads the
    job's shape from SLURM_* and starts 2 ranks per node: 4 ranks, SHM inside a node and TCP
    across."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text(FAKE_SRUN)
    (bindir / "srun").chmod(0o755)
    nodes = ["tnode1", "tnode2"]
    job_id = 4711
    with marked() as marker, named_hosts("ls", nodes) as hs:
        env = job_env(marker, PATH=f"{bindir}:{os.environ['PATH']}",
                      SLURM_JOB_ID=str(job_id), SLURM_JOBID=str(job_id), SLURM_JOB_NAME="xccl-train",
                      SLURM_JOB_NODELIST="tnode[1-2]", SLURM_NODELIST="tnode[1-2]",
                      SLURM_NNODES="2", SLURM_JOB_NUM_NODES="2", SLURM_NODEID="0",
                      SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NTASKS="2",
                      SLURM_NTASKS_PER_NODE="1", SLURM_TASKS_PER_NODE="1(x2)",
                      SLURM_SUBMIT_DIR=REPO, SLURMD_NODENAME="tnode1",
                      TEST_SRUN_NETNS=",".join(f"{n}={h.name}" for n, h in zip(nodes, hs)),
                      NPROC_PER_NODE="2", XCCL_DEBUG="INFO", XCCL_DEBUG_SUBSYS="INIT")
        [(rc, text)] = finish([popen(["bash", template("slurm", "train.sbatch")], env,
                                     cwd=str(tmp_path), host=hs[0])], 170)
    assert rc == 0, text[-6000:]
    port = 20000 + job_id % 20000
    for node in range(2):
        assert f"xcclrun: slurm: node {node} of 2, 2 process(es) per node, master tnode1:{port}" \
            in text, text[-5000:]
    check_hello(text, 4)
    check_across(text, 4, 2, lambda h: f"10.231.0.{h + 1}")


# ---------------------------------------------------------------- Kubeflow PyTorchJob

def load_job():
    with open(template("k8s", "pytorchjob.yaml")) as f:
        return yaml.safe_load(f)


def job_validator():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed (scripts/setup.sh)")
    with open(template("k8s", "pytorchjob.schema.json")) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def pytorch_container(job, rtype):
    [c] = [c for c in job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"]
           if c["name"] == "pytorch"]
    return c


def operator_env(job, rtype, index):
    """What the training operator (kubeflow.org/v1, pkg/controller.v1/pytorch: envvar.go,
    master.go) appends to the pytorch container's own env for replica `index` of `rtype`:
    PYTHONUNBUFFERED, MASTER_PORT (the Master's port named pytorchjob-port), MASTER_ADDR (the
    Master pod's service, <job>-master-0), WORLD_SIZE (pods x nprocPerNode when a number),
    RANK and PET_NODE_RANK (0 for the Master, 1 + index for a Worker), PET_NPROC_PER_NODE
    and, without an elasticPolicy, PET_NNODES (pods in all)."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    [port] = [p["containerPort"] for p in pytorch_container(job, "Master").get("ports", [])
              if p.get("name") == "pytorchjob-port"]
    pods = sum(s["replicas"] for s in specs.values())
    nproc = job["spec"].get("nprocPerNode", "auto")
    rank = index + (1 if rtype == "Worker" else 0)
    env = {"PYTHONUNBUFFERED": "0", "MASTER_PORT": str(port),
           "MASTER_ADDR": f"{job['metadata']['name']}-master-0",
           "WORLD_SIZE": str(pods * (int(nproc) if nproc.isdigit() else 1)), "RANK": str(rank),
           "PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": str(rank)}
    if "elasticPolicy" not in job["spec"]:
        env["PET_NNODES"] = str(pods)
    return env


def test_pytorchjob_manifest_has_the_operator_s_structure():
    """The manifest validates; copies broken the ways the operator refuses do not."""
    job, v = load_job(), job_validator()
    errors = [e.message for e in v.iter_errors(job)]
    assert errors == []
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    for rtype in ("Master", "Worker"):
        c = pytorch_container(job, rtype)
        assert c["command"] == ["xcclrun"] and c["args"][0] == "launcher/examples/hello_allreduce.py"
    assert operator_env(job, "Master", 0)["MASTER_PORT"] == "23456"

    def broken(edit):
        j = load_job()
        edit(j)
        return [e.message for e in v.iter_errors(j)]

    specs = lambda j: j["spec"]["pytorchReplicaSpecs"]  # noqa: E731
    assert broken(lambda j: specs(j)["Master"].update(replicas=2))
    assert broken(lambda j: specs(j)["Worker"].update(restartPolicy="Sometimes"))
    assert broken(lambda j: specs(j)["Worker"]["template"]["spec"]["containers"][0].update(name="main"))
    assert broken(lambda j: specs(j).update(Chief=specs(j)["Worker"]))
    assert broken(lambda j: j.update(apiVersion="kubeflow.org/v2"))
    assert broken(lambda j: j["spec"].pop("pytorchReplicaSpecs"))
    assert broken(lambda j: specs(j)["Master"].pop("template"))


@pytest.mark.skipif(bool(NO_NETNS), reason=NO_NETNS or "ok")
@pytest.mark.timeout(200)
def test_pytorchjob_pods_on_two_namespace_hosts():
    """Each replica of the manifest as a pod: its own host, its container's command and args
    in its workingDir (this checkout stands for the image's /opt/torch_xccl), its env plus
    the operator's; the Master's service name resolves to the Master's host. xcclrun starts
    nprocPerNode ranks per pod: 4 ranks."""
    job = load_job()
    name = job["metadata"]["name"]
    pods = [(rtype, i) for rtype in ("Master", "Worker")
            for i in range(job["spec"]["pytorchReplicaSpecs"][rtype]["replicas"])]
    assert len(pods) == 2
    with marked() as marker, named_hosts("lk", [f"{name}-master-0", f"{name}-worker-0"]) as hs:
        procs = []
        for (rtype, i), h in zip(pods, hs):
            c = pytorch_container(job, rtype)
            env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "PYTHONPATH") if k in os.environ}
            env.update(TEST_TEMPLATE_MARKER=marker)  # to find the pod's processes, nothing else
            env.update({e["name"]: e["value"] for e in c.get("env", [])})
            env.update(operator_env(job, rtype, i))
            assert c["workingDir"] == "/opt/torch_xccl"
            procs.append(popen(c["command"] + c.get("args", []), env, cwd=REPO, host=h))
        outs = finish(procs, 170)
    text = "\n".join(t for _, t in outs)
    assert [rc for rc, _ in outs] == [0, 0], text[-6000:]
    for node in range(2):
        assert f"xcclrun: pytorchjob: node {node} of 2, 2 process(es) per node, master " \
               f"{name}-master-0:23456" in text, text[-5000:]
    check_hello(text, 4)


# ---------------------------------------------------------------- Open MPI

@pytest.mark.skipif(bool(NO_MPIRUN), reason=NO_MPIRUN or "ok")
@pytest.mark.timeout(120)
def test_mpirun_on_this_host():
    """run.sh with its defaults: mpirun starts 2 ranks here, xcclrun maps OMPI_COMM_WORLD_*."""
    with marked() as marker:
        [(rc, text)] = finish([popen(["bash", template("mpi", "run.sh")],
                                     job_env(marker, MASTER_PORT=str(free_port())))], 100)
    assert rc == 0, text[-6000:]
    for r in range(2):
        assert f"xcclrun: openmpi: rank {r} of 2 (node 0 of 1, local {r} of 2)" in text, text[-5000:]
    check_hello(text, 2)


@pytest.mark.skipif(bool(NO_MPIRUN), reason=NO_MPIRUN or "ok")
@pytest.mark.skipif(bool(NO_NETNS), reason=NO_NETNS or "ok")
@pytest.mark.timeout(200)
def test_mpirun_on_two_namespace_hosts(tmp_path):
    """run.sh with HOSTS=mnode1:2,mnode2:2 from the first host; mpirun reaches each node
    through its remote-start agent (plm_rsh_agent), here `ip netns exec <node's namespace>`
    instead of ssh. Ranks 0-1 on the first host, 2-3 on the second."""
    nodes = ["mnode1", "mnode2"]
    with marked() as marker, named_hosts("lm", nodes) as hs:
        agent = tmp_path / "netns_rsh"
        cases = "".join(f"  {n}) ns={h.name} ;;\n" for n, h in zip(nodes, hs))
        agent.write_text("#!/bin/sh\n# mpirun's ssh: run the command string in the node's namespace\n"
                         f'case "$1" in\n{cases}  *) echo "no node $1" >&2; exit 1 ;;\nesac\n'
                         'shift\nexec ip netns exec "$ns" /bin/sh -c "$*"\n')
        agent.chmod(0o755)
        env = job_env(marker, NP="4", PPN="2", HOSTS="mnode1:2,mnode2:2",
                      OMPI_MCA_plm_rsh_agent=str(agent),
                      MPIRUN_ARGS="--mca oob_tcp_if_include 10.231.0.0/24",
                      XCCL_DEBUG="INFO", XCCL_DEBUG_SUBSYS="INIT")
        [(rc, text)] = finish([popen(["bash", template("mpi", "run.sh")], env, host=hs[0])], 170)
    assert rc == 0, text[-6000:]
    for r in range(4):
        assert f"xcclrun: openmpi: rank {r} of 4 (node {r // 2} of 2, local {r % 2} of 2), " \
               "master mnode1:29500" in text, text[-5000:]
    check_hello(text, 4)
    check_across(text, 4, 2, lambda h: f"10.231.0.{h + 1}")


# ---------------------------------------------------------------- the seed's two-node command

@pytest.mark.skipif(bool(NO_NETNS), reason=NO_NETNS or "ok")
@pytest.mark.timeout(200)
def test_two_nodes_script_on_two_namespace_hosts():
    """two_nodes.sh 0 10.231.0.1 on one host, two_nodes.sh 1 10.231.0.1 on the other."""
    with marked() as marker, named_hosts("l2") as hs:
        env = job_env(marker, XCCL_DEBUG="INFO", XCCL_DEBUG_SUBSYS="INIT")
        procs = [popen(["bash", template("two_nodes.sh"), str(node), hs[0].addr], env, host=h)
                 for node, h in enumerate(hs)]
        outs = finish(procs, 170)
    text = "\n".join(t for _, t in outs)
    assert [rc for rc, _ in outs] == [0, 0], text[-6000:]
    check_hello(text, 4)
    check_across(text, 4, 2, lambda h: f"10.231.0.{h + 1}")
