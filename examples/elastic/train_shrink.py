"""Training that loses a rank and keeps going, then takes a replacement: DDP over xccl.

    python examples/elastic/train_shrink.py                 # 4 ranks on xdev, rank 2 dies
    python examples/elastic/train_shrink.py --device cpu --world 4 --victim 0

What happens (docs/ELASTIC.md):

1. The launcher (this process) hosts the TCP store and starts `--world` workers. They train a
   small MLP with DDP on a fixed synthetic dataset; each step takes the next
   `batch * world` samples of the epoch, rank r the r-th slice.
2. At step `--kill-step` the victim SIGKILLs itself in the middle of its backward pass, while
   the others are inside the gradient allreduce. Their step raises DistBackendError before
   any parameter changes (the optimizer never runs on partial gradients).
3. The survivors call torch_xccl.survivors.shrink(): it finds the lost rank (its process no
   longer answers), and dist.shrink_group makes the new default group from the old
   communicators (xcclCommShrink, no store round). They wrap the model in a new DDP (which
   gives all of them the new rank 0's weights), take rank 0's position in the epoch (a
   survivor may have completed the step another failed), and redo the step with the same
   samples split three ways: nothing is lost or seen twice.
4. At the end of the epoch the launcher's replacement process joins: survivors and newcomer
   form a fresh 4-rank group (a new store scope), rank 0 broadcasts the weights, and the second
   epoch runs on 4 ranks.
5. Checks: the launcher reruns, in fresh processes, a 3-rank job from the state saved at the
   shrink and a 4-rank job from the state saved at the regrowth; the losses must equal the
   survivors' step for step (the same sums in the same order: bitwise here).

Prints one JSON line (`RESULT {...}`): the seconds from the failure to the survivors' first
completed step, the losses, and the checks.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import torch

SAMPLES, FEATURES, BATCH = 1920, 32, 16  # 1920 = 16 x 120: whole steps at 3 and 4 ranks
LR = 0.05


def dataset():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    order = torch.randperm(SAMPLES, generator=g)
    return x[order], y[order]


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 1))


class Trainer:
    """One rank's training state: the model on its device, and where the epoch is."""

    def __init__(self, device: str, rank: int):
        import torch_xccl  # noqa: F401  (routes "xccl", registers xdev)

        if device == "xdev":
            torch.xdev.set_device(rank % torch.xdev.device_count())
            self.dev = torch.device("xdev", rank % torch.xdev.device_count())
        else:
            self.dev = torch.device("cpu")
        self.x, self.y = dataset()
        self.model = make_model().to(self.dev)
        self.ddp = None
        self.losses: list[list] = []  # [epoch, cursor, world, loss]

    def wrap(self):
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.ddp = DDP(self.model)
        self.opt = torch.optim.SGD(self.ddp.parameters(), lr=LR)

    def step(self, epoch: int, cursor: int, on_backward=None) -> None:
        import torch.distributed as dist

        world, rank = dist.get_world_size(), dist.get_rank()
        lo = cursor + rank * BATCH
        xb = self.x[lo:lo + BATCH].to(self.dev)
        yb = self.y[lo:lo + BATCH].to(self.dev)
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(self.ddp(xb), yb)
        if on_backward is not None:
            loss.register_hook(lambda g: (on_backward(), g)[1])
        loss.backward()
        self.opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        self.losses.append([epoch, cursor, world, total.item() / world])

    def save(self, path: str, epoch: int, cursor: int) -> None:
        state = {k: v.cpu() for k, v in self.model.state_dict().items()}
        torch.save({"model": state, "epoch": epoch, "cursor": cursor}, path)

    def load(self, path: str) -> tuple[int, int]:
        ck = torch.load(path)
        self.model.load_state_dict(ck["model"])
        return ck["epoch"], ck["cursor"]

    def broadcast_weights(self) -> None:
        import torch.distributed as dist

        with torch.no_grad():
            for p in self.model.state_dict().values():
                dist.broadcast(p, src=0)


def init_group(store, prefix: str, rank: int, world: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("xccl", store=dist.PrefixStore(prefix, store), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))


def connect_store(port: int):
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, is_master=False,
                         timeout=datetime.timedelta(seconds=120))


def run_epoch(t: Trainer, epoch: int, cursor: int, kill_at=None) -> dict:
    """Steps to the end of the epoch; a failed step shrinks the group and is redone."""
    import torch.distributed as dist
    import torch_xccl

    info = {}
    step = 0
    # Whole steps only (drop_last): with the default kill step every sample is used.
    while cursor + BATCH * dist.get_world_size() <= SAMPLES:
        hook = kill_at if kill_at is not None and step == kill_at[0] else None
        try:
            t.step(epoch, cursor, on_backward=hook[1] if hook else None)
        except torch.distributed.DistBackendError as e:
            failed_at = time.monotonic()
            info["error"] = str(e).splitlines()[0][:200]
            lost = torch_xccl.survivors.lost_ranks(timeout=2.0)
            torch_xccl.survivors.shrink(exclude=lost)
            info["lost"] = lost
            # DDP on the new default group; its constructor gives every survivor the new rank
            # 0's weights. The survivors may stand at different steps (one can complete the
            # step in which another failed, when the data it still needed had arrived): all
            # take the new rank 0's position too, so model and data agree.
            t.wrap()
            at = torch.tensor([cursor], dtype=torch.int64)
            dist.broadcast(at, src=0)
            cursor = int(at.item())
            if dist.get_rank() == 0:
                t.save(info_path("shrink"), epoch, cursor)
            t.step(epoch, cursor)  # the failed step again, on the survivors
            info["seconds_to_first_step"] = time.monotonic() - failed_at
            info["first_step_done_at"] = time.time()
            cursor += BATCH * dist.get_world_size()
            step += 1
            continue
        cursor += BATCH * dist.get_world_size()
        step += 1
    return info


def info_path(name: str) -> str:
    return os.path.join(os.environ["ELASTIC_DIR"], f"{name}.pt")


def worker(args) -> None:
    import torch.distributed as dist

    store = connect_store(args.port)
    t = Trainer(args.device, args.rank)
    out = {"rank": args.rank}
    if args.role == "reference":  # a fresh job from a saved state, no faults
        init_group(store, f"ref-{args.tag}", args.rank, args.world)
        epoch, cursor = t.load(info_path(args.tag))
        t.wrap()
        run_epoch(t, epoch, cursor)
    elif args.role == "replacement":  # joins the regrown group
        init_group(store, "gen1", args.world - 1, args.world)
        t.wrap()
        t.broadcast_weights()
        run_epoch(t, 1, 0)
    else:
        init_group(store, "gen0", args.rank, args.world)
        t.wrap()

        def die():
            with open(os.path.join(os.environ["ELASTIC_DIR"], "killed_at"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

        kill_at = (args.kill_step, die) if args.rank == args.victim else None
        out.update(run_epoch(t, 0, 0, kill_at))
        # Regrow: a fresh group with the replacement (the launcher started it), rank 0's
        # weights to everyone, the next epoch on the full size.
        rank = dist.get_rank()
        dist.destroy_process_group()
        init_group(store, "gen1", rank, args.world)
        t.wrap()
        t.broadcast_weights()
        if rank == 0:
            t.save(info_path("grow"), 1, 0)
        run_epoch(t, 1, 0)
    out["losses"] = t.losses
    dist.destroy_process_group()
    print("WORKER " + json.dumps(out), flush=True)


def launch(args, role: str, rank: int, world: int, tag: str = "") -> subprocess.Popen:
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--rank", str(rank),
           "--world", str(world), "--port", str(args.port), "--device", args.device,
           "--victim", str(args.victim), "--kill-step", str(args.kill_step), "--tag", tag]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def collect(procs, timeout: float) -> dict:
    outs = {}
    for r, p in procs.items():
        text, _ = p.communicate(timeout=timeout)
        if p.returncode != 0:
            print(f"worker {r} exited with {p.returncode}", file=sys.stderr, flush=True)
        for line in text.splitlines():
            if line.startswith("WORKER "):
                outs[r] = json.loads(line[len("WORKER "):])
    return outs


def expected_samples(args) -> int:
    """Samples of the first epoch: the steps before the loss at full size, then whole steps
    of the survivors (every sample when the rest divides evenly, as with the defaults)."""
    before = args.kill_step * BATCH * args.world
    step = BATCH * (args.world - 1)
    return before + (SAMPLES - before) // step * step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="xdev", choices=["xdev", "cpu"])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--victim", type=int, default=2)
    ap.add_argument("--kill-step", type=int, default=6)
    ap.add_argument("--role", default="launcher",
                    choices=["launcher", "worker", "replacement", "reference"])
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    if args.role != "launcher":
        worker(args)
        return 0

    import torch.distributed as dist

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["ELASTIC_DIR"] = tempfile.mkdtemp(prefix="xccl-elastic-")
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    args.port = store.port
    procs = {r: launch(args, "worker", r, args.world) for r in range(args.world)}
    while procs[args.victim].poll() is None:  # the victim's death, seen by its launcher
        time.sleep(0.05)
    victim_exit = procs.pop(args.victim).returncode
    procs[args.world - 1 + 100] = launch(args, "replacement", args.world - 1, args.world)
    outs = collect(procs, 600)
    survivors = [outs[r] for r in range(args.world) if r != args.victim]
    with open(os.path.join(os.environ["ELASTIC_DIR"], "killed_at")) as f:
        killed_at = float(f.read())
    losses = survivors[0]["losses"]
    shrunk = [x for x in losses if x[0] == 0 and x[2] == args.world - 1]
    grown = [x for x in losses if x[0] == 1]
    # The references: fresh jobs from the saved states.
    refs = {}
    for tag, world in (("shrink", args.world - 1), ("grow", args.world)):
        rp = {r: launch(args, "reference", r, world, tag) for r in range(world)}
        refs[tag] = collect(rp, 600)[0]["losses"]
    result = {
        "device": args.device,
        "world": args.world,
        "victim": args.victim,
        "victim_exit": victim_exit,
        "lost_seen": [s.get("lost") for s in survivors],
        # From the SIGKILL to the last survivor's first completed step on the shrunk group
        # (wall clock, one host), and from the failure each survivor saw to that step.
        "seconds_kill_to_first_step": max(s["first_step_done_at"] for s in survivors) - killed_at,
        "seconds_failure_to_first_step": max(s["seconds_to_first_step"] for s in survivors),
        "steps_before": sum(1 for x in losses if x[0] == 0 and x[2] == args.world),
        "steps_on_survivors": len(shrunk),
        "steps_after_regrow": len(grown),
        "samples_epoch0": sum(BATCH * x[2] for x in losses if x[0] == 0),
        "shrink_matches_reference": shrunk == refs["shrink"],
        "grow_matches_reference": grown == refs["grow"],
        "every_survivor_agrees": all(s["losses"] == losses for s in survivors),
        "loss_first_last": [losses[0][3], losses[-1][3]],
    }
    result["ok"] = (result["shrink_matches_reference"] and result["grow_matches_reference"]
                    and result["every_survivor_agrees"]
                    and result["samples_epoch0"] == expected_samples(args)
                    and victim_exit == -signal.SIGKILL)
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
