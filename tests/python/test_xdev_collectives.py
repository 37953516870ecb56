"""The xccl backend on xdev tensors, two real processes: each rank's contribution is written
by a fill queued behind a slow op on its xdev stream, so the sum is right only if the backend
waits for the work queued on the tensors' devices. Hard timeout: a hang fails."""
import os
import subprocess
import sys
import textwrap

from xdev_util import ROOT

WORKER = textwrap.dedent("""
    import sys, torch, torch_xccl, torch.distributed as dist
    rank, world, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    store = dist.FileStore(path, world)
    # the default routing maps only cpu to xccl; name xdev explicitly
    dist.init_process_group("cpu:xccl,xdev:xccl", store=store, rank=rank, world_size=world)
    dev = f"xdev:{rank + 1}"
    z = torch.zeros(1000, device=dev)
    torch.xdev.synchronize(rank + 1)
    with torch.xdev.device(rank + 1):
        torch.xdev._sleep(400)
        z.fill_(rank + 1.0)  # queued behind the sleep: not there yet when all_reduce is called
    dist.all_reduce(z)
    assert z.device == torch.device(dev)
    print(rank, z.sum().item(), flush=True)
    dist.destroy_process_group()
""")


def test_allreduce_of_xdev_tensors_waits_for_their_queued_work(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(r), "2", str(tmp_path / "store")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd="/")
             for r in range(2)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            outs.append(out.strip())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert sorted(outs) == ["0 3000.0", "1 3000.0"]
