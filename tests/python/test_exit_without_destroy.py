"""Processes that end without destroy_process_group exit cleanly (the transformers Trainer,
accelerate, DeepSpeed and most scripts never destroy their groups).

The backend's completion thread releases the Works it completes, and a Work's tensors may own
their Python objects; once Python finalizes, a thread asking for the GIL is ended by
pthread_exit, which aborted the process ("terminate called without an active exception",
SIGABRT) in about half of such exits on xdev. torch_xccl now ends the completion threads from
atexit. Several rounds, because the race was a coin toss per process."""
import os
import subprocess
import sys
import textwrap

import pytest

from harness import REPO, communicate_all, free_port

BODY = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    import torch_xccl
    rank = int(os.environ["RANK"])
    torch.xdev.set_device(rank)
    dist.init_process_group("xccl")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8).to("xdev"),
                                                      device_ids=[rank])
    for _ in range(3):
        model(torch.randn(4, 8, device="xdev")).sum().backward()
    out = torch.empty(8, device="xdev")
    dist.all_gather_into_tensor(out, torch.ones(4, device="xdev"))
    print("done", rank, flush=True)
    # no destroy_process_group(): the interpreter finalizes with the group alive
""")


@pytest.mark.timeout(300)
def test_ranks_that_never_destroy_their_group_exit_zero():
    procs = []
    for _ in range(3):  # three worlds of two at once: the race was a coin toss per process
        port = free_port()
        for rank in range(2):
            env = dict(os.environ, PYTHONPATH=REPO, MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                       LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen([sys.executable, "-c", BODY], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
    for i, (rc, out) in enumerate(communicate_all(procs, timeout=240)):
        assert f"done {i % 2}" in out, out
        assert rc == 0 and "terminate called" not in out, f"process {i}: rc={rc}\n{out}"
