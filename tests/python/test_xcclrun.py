"""xcclrun (torch_xccl/launcher): the job's shape from Slurm / Open MPI / PMI / PyTorchJob
variables or flags, then torchrun; and real jobs: one node, one process per rank under faked
mpirun variables, two hosts made of network namespaces (the seed's two-node
torch.distributed.launch command, torchrun, xcclrun under faked Slurm and PyTorchJob) and
three hosts on a bridge (torchrun, xcclrun under faked Slurm), where every rank must end with
the same parameters and the logs show SHM inside a host and TCP across, for every pair of
ranks. Every process has a hard timeout."""
import os
import re
import subprocess
import sys

import pytest

import netns
from harness import communicate_all, free_port
from torch_xccl.launcher import cli
from torch_xccl.launcher.environment import LaunchError, detect, tasks_per_node

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "examples", "ddp_demo", "train.py")
XCCLRUN = [sys.executable, "-m", "torch_xccl.launcher.cli"]


def resolve(argv, env):
    return cli.resolve(cli._parser().parse_args(argv + ["train.py"]), env)


# ---------------------------------------------------------------- the job's shape

def test_slurm_one_launcher_per_node():
    env = {"SLURM_JOB_ID": "881234", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NNODES": "2",
           "SLURM_NODEID": "1", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_PROCID": "1",
           "SLURM_GPUS_ON_NODE": "4"}
    s = resolve([], env)
    assert (s.source, s.nnodes, s.node_rank, s.master_addr, s.nproc_per_node) == \
        ("slurm", 2, 1, "gpu07", 4)
    assert s.master_port == 20000 + 881234 % 20000 and not s.per_rank
    argv = cli.torchrun_argv(s, cli._parser().parse_args(["train.py", "--lr", "1"]))
    assert argv[-3:] == ["train.py", "--lr", "1"] and argv[:4] == ["--nnodes", "2", "--node-rank", "1"]


def test_slurm_srun_started_every_rank():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1,n2", "SLURM_NNODES": "2",
           "SLURM_NODEID": "1", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "3",
           "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}
    s = resolve([], env)
    assert s.per_rank and (s.rank, s.world_size, s.local_rank, s.local_world_size) == (3, 4, 1, 2)
    assert cli.rank_env(s)["MASTER_ADDR"] == "n1"
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_openmpi_and_pmi():
    s = resolve([], {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2",
                     "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                     "MASTER_ADDR": "10.0.0.1"})
    assert (s.source, s.nnodes, s.node_rank, s.rank, s.local_rank) == ("openmpi", 2, 1, 2, 0)
    s = resolve([], {"PMI_SIZE": "2", "PMI_RANK": "1", "MPI_LOCALRANKID": "0",
                     "MPI_LOCALNRANKS": "1", "MASTER_ADDR": "h0"})
    assert (s.source, s.nnodes, s.node_rank, s.per_rank, s.nproc_per_node) == ("pmi", 2, 1, False, 1)
    with pytest.raises(LaunchError, match="mpirun -x MASTER_ADDR"):
        resolve([], {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0",
                     "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})


def test_pytorchjob_flags_and_bad_input():
    s = resolve([], {"PET_NNODES": "3", "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "8",
                     "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"})
    assert (s.source, s.nnodes, s.node_rank, s.nproc_per_node, s.master_addr, s.master_port) == \
        ("pytorchjob", 3, 2, 8, "job-master-0", 23456)
    s = resolve(["--nnodes", "2", "--node-rank", "1", "--master-addr", "a", "--nproc-per-node", "3"], {})
    assert (s.source, s.nnodes, s.node_rank, s.master_addr, s.nproc_per_node, s.master_port) == \
        ("flags", 2, 1, "a", 3, 29500)
    with pytest.raises(LaunchError, match="no master address"):
        resolve(["--nnodes", "2"], {})
    with pytest.raises(LaunchError, match="node rank 2 of 2"):
        resolve(["--nnodes", "2", "--node-rank", "2", "--master-addr", "a"], {})
    with pytest.raises(LaunchError, match="not an integer"):
        detect({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "a", "SLURM_NODEID": "x"})


@pytest.mark.timeout(60)
def test_dry_run_and_errors_from_the_command_line():
    p = subprocess.run(XCCLRUN + ["--dry-run", "--nproc-per-node", "2", "train.py", "--x", "1"],
                       capture_output=True, text=True, timeout=50)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == ("torchrun --nnodes 1 --node-rank 0 --nproc-per-node 2 --master-addr "
                                "127.0.0.1 --master-port 29500 --max-restarts 0 train.py --x 1")
    p = subprocess.run(XCCLRUN + ["--dry-run", "--rdzv-timeout", "15", "train.py"],
                       capture_output=True, text=True, timeout=50)
    assert p.returncode == 0 and "--max-restarts 0 --rdzv-conf timeout=15 train.py" in p.stdout, \
        p.stdout + p.stderr
    p = subprocess.run(XCCLRUN + ["--nnodes", "2", "train.py"], capture_output=True, text=True,
                       timeout=50)
    assert p.returncode == 2 and "no master address" in p.stderr, p.stderr


# ---------------------------------------------------------------- real jobs

def checksums(text):
    return re.findall(r"rank (\d+) final parameter checksum (\S+)", text)


def demo_env(**extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


@pytest.mark.timeout(180)
def test_one_node():
    p = subprocess.run(XCCLRUN + ["--nproc-per-node", "2", "--master-port", str(free_port()), DEMO,
                                  "--device", "cpu", "--steps", "3"],
                       capture_output=True, text=True, timeout=170, env=demo_env())
    assert p.returncode == 0, p.stdout + p.stderr
    sums = checksums(p.stdout)
    assert len(sums) == 2 and len({v for _, v in sums}) == 1, p.stdout


@pytest.mark.timeout(180)
def test_one_process_per_rank_under_mpirun_variables():
    port = str(free_port())
    procs = [subprocess.Popen(XCCLRUN + [DEMO, "--device", "cpu", "--steps", "3"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=demo_env(OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK=str(r),
                                           OMPI_COMM_WORLD_LOCAL_RANK=str(r),
                                           OMPI_COMM_WORLD_LOCAL_SIZE="2",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
             for r in range(2)]
    outs = communicate_all(procs, 170)
    text = "".join(o for _, o in outs)
    assert all(rc == 0 for rc, _ in outs), text
    sums = checksums(text)
    assert len(sums) == 2 and len({v for _, v in sums}) == 1, text


def node_command(mode, node, master, port, nnodes=2):
    """(extra environment, command) that starts node `node` of `nnodes`, 2 ranks per node."""
    demo = [DEMO, "--device", "cpu", "--steps", "3"]
    if mode == "launch":  # the seed's command
        return {}, [sys.executable, "-m", "torch.distributed.launch", f"--nnodes={nnodes}",
                    f"--node_rank={node}", f"--master_addr={master}", f"--master_port={port}",
                    "--nproc_per_node", "2", "--use-env"] + demo
    if mode == "torchrun":
        return {}, [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
                    f"--node-rank={node}", f"--master-addr={master}", f"--master-port={port}",
                    "--nproc-per-node=2"] + demo
    if mode == "xcclrun-slurm":
        return {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": f"10.231.0.[1-{nnodes}]",
                "SLURM_NNODES": str(nnodes), "SLURM_NODEID": str(node),
                "SLURM_TASKS_PER_NODE": f"1(x{nnodes})", "SLURM_NTASKS": str(nnodes),
                "SLURM_PROCID": str(node), "SLURM_LOCALID": "0", "MASTER_PORT": str(port)}, \
            XCCLRUN + ["--nproc-per-node", "2"] + demo
    assert mode == "xcclrun-pytorchjob"
    return {"PET_NNODES": str(nnodes), "PET_NODE_RANK": str(node), "PET_NPROC_PER_NODE": "2",
            "MASTER_ADDR": master, "MASTER_PORT": str(port)}, XCCLRUN + demo


def run_on_hosts(mode, nnodes, tag, port, timeout):
    """The DDP demo on nnodes namespace hosts x 2 ranks under `mode`: every rank ends with the
    same parameters, and every rank's connection to every other is logged SHM inside its host
    and TCP to the peer's host address across (rank r runs on host r // 2)."""
    with netns.hosts(nnodes, tag, switch=nnodes > 2) as hosts:
        procs = []
        for node, h in enumerate(hosts):
            extra, cmd = node_command(mode, node, hosts[0].addr, port, nnodes)
            env = demo_env(XCCL_DEBUG="INFO", XCCL_DEBUG_SUBSYS="INIT", **extra)
            env.pop("XCCL_NODE_ID", None)  # the namespaces alone make them separate hosts
            procs.append(h.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, env=env))
        outs = communicate_all(procs, timeout)
    text = "\n".join(o for _, o in outs)
    assert all(rc == 0 for rc, _ in outs), text[-6000:]
    world = 2 * nnodes
    sums = checksums(text)
    assert sorted(int(r) for r, _ in sums) == list(range(world)), text[-4000:]
    assert len({v for _, v in sums}) == 1, text[-4000:]
    for r in range(world):
        for p in range(world):
            if p == r:
                continue
            via = "SHM" if p // 2 == r // 2 else rf"TCP 10\.231\.0\.{p // 2 + 1}\b"
            assert re.search(rf"rank {r} -> {p} via {via}", text), (r, p, via, text[-4000:])


@pytest.mark.skipif(bool(netns.available()), reason=netns.available() or "ok")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["launch", "torchrun", "xcclrun-slurm", "xcclrun-pytorchjob"])
def test_two_hosts_from_network_namespaces(mode):
    run_on_hosts(mode, 2, mode[-1], 29611, 280)


@pytest.mark.skipif(bool(netns.available()), reason=netns.available() or "ok")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["torchrun", "xcclrun-slurm"])
def test_three_hosts_from_network_namespaces(mode):
    """Three hosts on one switch (a bridge), 2 ranks each: 6 ranks, 4 of each rank's 5
    peers across hosts."""
    run_on_hosts(mode, 3, "3" + mode[-1], 29612, 280)


LATE = """
import os, time, torch, torch.distributed as dist, torch_xccl
rank = int(os.environ["RANK"])
dist.init_process_group("xccl")
torch.xdev.set_device(rank)
if rank == 1:
    time.sleep(2.0)  # late to the group's first xdev operation (its communicator's creation)
t = torch.ones(4, device=f"xdev:{rank}")
dist.all_reduce(t)
assert t.cpu().tolist() == [2.0] * 4
dist.destroy_process_group()
"""


@pytest.mark.timeout(120)
def test_a_late_peer_is_not_a_flood():
    """Rank 1 comes 2 s late to the first xdev collective: rank 0 waits quietly (a notice
    would come after XCCL_WAIT_NOTICE_S=10 s), no line per store poll, no C++ backtrace."""
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", LATE], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=demo_env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
             for r in range(2)]
    try:
        errs = [p.communicate(timeout=100)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], errs
    assert "store get" not in errs[0] and "Exception raised from" not in errs[0], errs[0][-3000:]
    assert len(errs[0].splitlines()) < 5, errs[0][-3000:]
