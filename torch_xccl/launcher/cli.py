"""The xcclrun command. See docs/LAUNCH.md.

    xcclrun [--nnodes N] [--node-rank R] [--nproc-per-node K|auto] [--master-addr A]
            [--master-port P] [--max-restarts M] [--rdzv-timeout S] [--dry-run] [-m]
            script [args...]

One launcher per node: the job's shape comes from the scheduler's variables (Slurm, Open MPI,
MPICH/PMI, PyTorchJob) or the flags, and torchrun's elastic agent (torch.distributed.run)
starts the node's processes, handles restarts and signals. When the scheduler already started
one process per rank (srun or mpirun with several tasks per node), xcclrun spawns nothing: it
gives this process its rank's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...) and
runs the script in its place.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Mapping, Optional, Sequence

from .environment import JobShape, LaunchError, detect

DEFAULT_PORT = 29500


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="xcclrun", description="Launch a torch.distributed job over xccl (torchrun underneath).")
    p.add_argument("--nnodes", type=int, help="nodes in the job (default: the scheduler's, else 1)")
    p.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int,
                   help="this node's index (default: the scheduler's, else 0)")
    p.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node",
                   help="processes per node, or 'auto': one per CUDA device if there are any, "
                        "else one per xdev device (default: the scheduler's GPUs, else 1)")
    p.add_argument("--master-addr", "--master_addr", dest="master_addr",
                   help="address of node 0 (default: the scheduler's first node / MASTER_ADDR)")
    p.add_argument("--master-port", "--master_port", dest="master_port", type=int,
                   help=f"its port (default: MASTER_PORT, one derived from the Slurm job id, "
                        f"else {DEFAULT_PORT})")
    p.add_argument("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=0,
                   help="torchrun's restarts of a failed node (default 0)")
    p.add_argument("--rdzv-timeout", dest="rdzv_timeout", type=int, default=None,
                   help="seconds a node waits for the others at start-up (torchrun's "
                        "--rdzv-conf timeout; default torchrun's, 600)")
    p.add_argument("-m", "--module", action="store_true", help="run script as a module (python -m)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would run (the torchrun command, or the rank's variables and "
                        "command) and exit")
    p.add_argument("script", help="the training script (or module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def auto_nproc() -> int:
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return torch.cuda.device_count()
    import torch_xccl  # noqa: F401  (registers xdev)

    return torch.xdev.device_count()


def resolve(args: argparse.Namespace, env: Mapping[str, str]) -> JobShape:
    shape = detect(env)
    if args.nnodes is not None:
        shape.nnodes = args.nnodes
    if args.node_rank is not None:
        shape.node_rank = args.node_rank
    if args.master_addr:
        shape.master_addr = args.master_addr
    if args.master_port is not None:
        shape.master_port = args.master_port
    if shape.nnodes < 1 or not 0 <= shape.node_rank < shape.nnodes:
        raise LaunchError(f"node rank {shape.node_rank} of {shape.nnodes} nodes")
    if not shape.master_addr:
        if shape.nnodes > 1 or (shape.per_rank and shape.world_size > (shape.local_world_size or 1)):
            how = {"openmpi": "mpirun -x MASTER_ADDR=<first node> ...",
                   "pmi": "mpiexec -genv MASTER_ADDR <first node> ..."}.get(shape.source, "")
            raise LaunchError(
                f"{shape.nnodes} nodes but no master address: pass --master-addr (node 0's "
                f"address) or set MASTER_ADDR{' (' + how + ')' if how else ''}")
        shape.master_addr = "127.0.0.1"
    shape.master_port = shape.master_port or DEFAULT_PORT
    if not shape.per_rank:
        if args.nproc_per_node == "auto":
            shape.nproc_per_node = auto_nproc()
        elif args.nproc_per_node is not None:
            try:
                shape.nproc_per_node = int(args.nproc_per_node)
            except ValueError:
                raise LaunchError(f"--nproc-per-node {args.nproc_per_node!r}: a number or 'auto'") from None
        shape.nproc_per_node = shape.nproc_per_node or 1
        if shape.nproc_per_node < 1:
            raise LaunchError(f"--nproc-per-node {shape.nproc_per_node}")
    elif args.nproc_per_node not in (None, str(shape.local_world_size)):
        raise LaunchError(f"the scheduler started {shape.local_world_size} process(es) on this node "
                          f"({shape.source}); --nproc-per-node {args.nproc_per_node} contradicts it")
    return shape


def torchrun_argv(shape: JobShape, args: argparse.Namespace) -> list[str]:
    argv = ["--nnodes", str(shape.nnodes), "--node-rank", str(shape.node_rank),
            "--nproc-per-node", str(shape.nproc_per_node), "--master-addr", shape.master_addr,
            "--master-port", str(shape.master_port), "--max-restarts", str(args.max_restarts)]
    if getattr(args, "rdzv_timeout", None):
        argv += ["--rdzv-conf", f"timeout={args.rdzv_timeout}"]
    if args.module:
        argv.append("--module")
    return argv + [args.script] + list(args.args)


def rank_env(shape: JobShape) -> dict[str, str]:
    return {"RANK": str(shape.rank), "WORLD_SIZE": str(shape.world_size),
            "LOCAL_RANK": str(shape.local_rank), "LOCAL_WORLD_SIZE": str(shape.local_world_size),
            "GROUP_RANK": str(shape.node_rank), "MASTER_ADDR": shape.master_addr,
            "MASTER_PORT": str(shape.master_port)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        shape = resolve(args, os.environ)
    except LaunchError as e:
        print(f"xcclrun: error: {e}", file=sys.stderr)
        return 2
    if shape.per_rank:
        env = rank_env(shape)
        cmd = [sys.executable] + (["-m"] if args.module else []) + [args.script] + list(args.args)
        print(f"xcclrun: {shape.source}: rank {shape.rank} of {shape.world_size} (node "
              f"{shape.node_rank} of {shape.nnodes}, local {shape.local_rank} of "
              f"{shape.local_world_size}), master {shape.master_addr}:{shape.master_port}",
              file=sys.stderr, flush=True)
        if args.dry_run:
            print(" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(cmd))
            return 0
        os.execvpe(cmd[0], cmd, {**os.environ, **env})
    targv = torchrun_argv(shape, args)
    print(f"xcclrun: {shape.source}: node {shape.node_rank} of {shape.nnodes}, "
          f"{shape.nproc_per_node} process(es) per node, master {shape.master_addr}:"
          f"{shape.master_port}", file=sys.stderr, flush=True)
    if args.dry_run:
        print("torchrun " + shlex.join(targv))
        return 0
    from torch.distributed.run import main as torchrun

    torchrun(targv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
