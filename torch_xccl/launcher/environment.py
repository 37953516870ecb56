"""Where am I, and how big is the job? Read from the scheduler's environment.

Every reader takes the environment as a mapping (tests pass dicts) and returns a JobShape or
None when its scheduler is not there. The first one that recognises its variables wins, in
the order of ``READERS``; flags on the command line override any field.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Mapping, Optional

import hostlist


class LaunchError(RuntimeError):
    """The environment or the flags do not describe a job that can start."""


@dataclasses.dataclass
class JobShape:
    source: str                      # "slurm", "openmpi", "pmi", "pytorchjob", "flags"
    nnodes: int = 1
    node_rank: int = 0
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    # Set when the scheduler started one process per rank (srun/mpirun with several tasks
    # per node): this process is that rank, nothing is spawned.
    rank: Optional[int] = None
    world_size: Optional[int] = None
    local_rank: Optional[int] = None
    local_world_size: Optional[int] = None
    nproc_per_node: Optional[int] = None  # launcher mode: what the scheduler asked for, if it says

    @property
    def per_rank(self) -> bool:
        return self.rank is not None


def _int(env: Mapping[str, str], name: str, default: Optional[int] = None) -> Optional[int]:
    v = env.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise LaunchError(f"{name}={v!r} is not an integer") from None


def _port_for_job(job_id: str) -> int:
    """A port every node of one job derives alike, spread over 20000-39999."""
    digits = re.sub(r"\D", "", job_id) or "0"
    return 20000 + int(digits[-6:]) % 20000


def tasks_per_node(spec: str) -> list[int]:
    """Slurm's SLURM_TASKS_PER_NODE, e.g. "2(x3),1" -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise LaunchError(f"SLURM_TASKS_PER_NODE={spec!r}: unexpected format")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def from_slurm(env: Mapping[str, str]) -> Optional[JobShape]:
    if "SLURM_JOB_ID" not in env or "SLURM_JOB_NODELIST" not in env:
        return None
    nodes = hostlist.expand_hostlist(env["SLURM_JOB_NODELIST"])
    if not nodes:
        raise LaunchError(f"SLURM_JOB_NODELIST={env['SLURM_JOB_NODELIST']!r} names no node")
    shape = JobShape("slurm", nnodes=_int(env, "SLURM_NNODES", len(nodes)),
                     node_rank=_int(env, "SLURM_NODEID", 0),
                     master_addr=env.get("MASTER_ADDR") or nodes[0],
                     master_port=_int(env, "MASTER_PORT") or _port_for_job(env["SLURM_JOB_ID"]))
    per_node = tasks_per_node(env["SLURM_TASKS_PER_NODE"]) if env.get("SLURM_TASKS_PER_NODE") else [1]
    if max(per_node) > 1 and "SLURM_PROCID" in env:  # srun started every rank
        shape.rank = _int(env, "SLURM_PROCID")
        shape.world_size = _int(env, "SLURM_NTASKS", sum(per_node))
        shape.local_rank = _int(env, "SLURM_LOCALID", 0)
        shape.local_world_size = per_node[min(shape.node_rank, len(per_node) - 1)]
    elif env.get("SLURM_GPUS_ON_NODE"):
        shape.nproc_per_node = _int(env, "SLURM_GPUS_ON_NODE")
    return shape


def _from_mpi(env: Mapping[str, str], source: str, size: str, rank: str, local_rank: str,
              local_size: str) -> Optional[JobShape]:
    if size not in env or rank not in env:
        return None
    world, me = _int(env, size), _int(env, rank)
    lsize, lrank = _int(env, local_size), _int(env, local_rank)
    if lsize is None or lrank is None:
        raise LaunchError(f"{source}: {size}/{rank} are set but not {local_size}/{local_rank}; "
                          "cannot tell how ranks sit on nodes")
    if world % lsize:
        raise LaunchError(f"{source}: {world} ranks do not split evenly into nodes of {lsize}")
    shape = JobShape(source, nnodes=world // lsize, node_rank=me // lsize,
                     master_addr=env.get("MASTER_ADDR"), master_port=_int(env, "MASTER_PORT"))
    if lsize > 1:  # mpirun started every rank
        shape.rank, shape.world_size = me, world
        shape.local_rank, shape.local_world_size = lrank, lsize
    return shape


def from_openmpi(env: Mapping[str, str]) -> Optional[JobShape]:
    return _from_mpi(env, "openmpi", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")


def from_pmi(env: Mapping[str, str]) -> Optional[JobShape]:
    # MPICH's Hydra (and Intel MPI) export PMI_SIZE/PMI_RANK and the local layout as
    # MPI_LOCALNRANKS/MPI_LOCALRANKID.
    return _from_mpi(env, "pmi", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")


def from_pytorchjob(env: Mapping[str, str]) -> Optional[JobShape]:
    # The Kubeflow training operator sets PET_* (torchrun's own flags as variables) on every
    # pod, and MASTER_ADDR/MASTER_PORT to the master pod's service.
    if "PET_NNODES" not in env and "PET_NODE_RANK" not in env:
        return None
    nnodes = env.get("PET_NNODES", "1")
    if ":" in nnodes:  # elastic "min:max"
        nnodes = nnodes.split(":")[-1]
    try:
        n = int(nnodes)
    except ValueError:
        raise LaunchError(f"PET_NNODES={env['PET_NNODES']!r} is not an integer") from None
    nproc = env.get("PET_NPROC_PER_NODE")
    return JobShape("pytorchjob", nnodes=n, node_rank=_int(env, "PET_NODE_RANK", 0),
                    master_addr=env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR"),
                    master_port=_int(env, "PET_MASTER_PORT") or _int(env, "MASTER_PORT"),
                    nproc_per_node=int(nproc) if nproc and nproc.isdigit() else None)


READERS: list[Callable[[Mapping[str, str]], Optional[JobShape]]] = [
    from_slurm, from_openmpi, from_pmi, from_pytorchjob]


def detect(env: Mapping[str, str]) -> JobShape:
    for reader in READERS:
        shape = reader(env)
        if shape is not None:
            return shape
    return JobShape("flags", master_addr=env.get("MASTER_ADDR"),
                    master_port=_int(env, "MASTER_PORT"))
