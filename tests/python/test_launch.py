"""The demo under torchrun (env://) and under python -m torch.distributed.launch."""
import os
import re
import subprocess
import sys

import pytest

from harness import REPO, free_port

DEMO = os.path.join(REPO, "examples", "ddp_demo", "train.py")
TIMEOUT = 150


def launch(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)  # the launcher and every worker
        out, _ = p.communicate()
        pytest.fail(f"launch timed out:\n{out[-3000:]}")
    assert p.returncode == 0, out[-4000:]
    return out


def check_demo_output(out, steps):
    assert re.search(r"backend=xccl device=(xdev:0|cpu) world_size=2", out), out
    losses = [float(x) for x in re.findall(r"step +\d+ +loss ([0-9.]+)", out)]
    assert len(losses) == steps, out
    assert losses[-1] < losses[0], losses  # it trains
    sums = re.findall(r"rank (\d) final parameter checksum (-?[0-9]+\.[0-9]{10})", out)
    assert sorted(r for r, _ in sums) == ["0", "1"], out
    assert len({s for _, s in sums}) == 1, sums  # DDP kept the ranks identical


@pytest.mark.timeout(TIMEOUT + 20)
def test_torchrun_demo():
    out = launch([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                  f"--master_port={free_port()}", DEMO, "--steps", "8"])
    check_demo_output(out, 8)


@pytest.mark.timeout(TIMEOUT + 20)
@pytest.mark.parametrize("device", ["cpu", "xdev"])
def test_torch_distributed_launch_demo(device):
    out = launch([sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node=2",
                  f"--master_port={free_port()}", DEMO, "--steps", "6", "--device", device])
    check_demo_output(out, 6)
