"""torchft over xccl: two replica groups train, one is SIGKILLed, the other goes on, the
lost one comes back, heals from the live one, and both finish with the same weights.

    pip install torchft            # beside torch (see docs/ELASTIC.md for the constraint)
    python examples/elastic/torchft_xccl.py [--steps 60] [--kill-step 10] [--device xdev]

The launcher (this process) runs torchft's lighthouse (the quorum service) and starts two
replica groups of one process each. Each builds a torchft Manager on
torch_xccl.ft.ProcessGroupXCCL (the process group torchft reconfigures at every quorum change),
wraps its model in torchft's DistributedDataParallel and optimizer wrapper, and trains on its
own data; torchft averages the gradients across the replica groups that are alive.

At step `--kill-step` replica 1 SIGKILLs itself inside a step. Replica 0's allreduce fails at
once (xccl: the peer is gone), torchft discards that step, the lighthouse forms a quorum of
one, and replica 0 keeps committing steps alone. The launcher restarts replica 1: it joins the
next quorum, receives replica 0's state (torchft's checkpoint transport), and from then on both
commit the same steps, `--together` of them (the replacement sets the common last step once it
has joined, so the run shows both phases on a machine of any speed). Prints `RESULT {...}`: the steps replica 0 committed alone, the seconds
from the kill to its next committed step, and whether both replicas end with equal weights.

`--device xdev` trains on the simulated accelerator (replica r on xdev:r). There a failed
collective would normally fail its xdev stream (RELIABILITY.md section 10); torch_xccl.ft makes
its communicators with xcclStreamErrorsReport, so the stream goes on as torchft expects and the
step is discarded through errored().
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta


def replica(args) -> None:
    import torch
    import torch.distributed as dist
    from torchft import Manager
    from torchft.ddp import DistributedDataParallel
    from torchft.optim import OptimizerWrapper

    from torch_xccl.ft import ProcessGroupXCCL

    dev = torch.device("xdev", args.replica % 2) if args.device == "xdev" else torch.device("cpu")
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1)).to(dev)
    opt_inner = torch.optim.SGD(model.parameters(), lr=0.05)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)

    def state_dict():
        return {"model": model.state_dict(), "optim": opt_inner.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt_inner.load_state_dict(sd["optim"])

    manager = Manager(pg=ProcessGroupXCCL(timeout=timedelta(seconds=20)), min_replica_size=1,
                      load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"replica{args.replica}", store_addr="127.0.0.1",
                      store_port=store.port, rank=0, world_size=1,
                      lighthouse_addr=args.lighthouse, timeout=timedelta(seconds=20),
                      quorum_timeout=timedelta(seconds=30))
    ddp = DistributedDataParallel(manager, model)
    opt = OptimizerWrapper(manager, opt_inner)
    if args.wait_go:  # the first replicas start together, so both are in the first quorum
        print("READY", flush=True)
        sys.stdin.readline()
    g = torch.Generator().manual_seed(100 + args.replica)
    log = []
    # Where both stop: the replacement, once it has joined, writes "the step it joined at +
    # --together" (at least --steps); until then the other replica goes on alone. So the
    # run shows steps together whatever the machine's speed, and both end on one step.
    stop_file = os.path.join(args.dir, "stop_at")

    def stop_at():
        try:
            with open(stop_file) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    while True:
        step, end = manager.current_step(), stop_at()
        if end is not None and step >= end:
            break
        if end is None and step >= 20 * args.steps:  # the replacement never came
            break
        x = torch.randn(32, 16, generator=g).to(dev)
        y = x.sum(dim=1, keepdim=True).tanh()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        time.sleep(args.step_ms / 1000)  # the rest of a real step's compute
        if args.die_at is not None and manager.current_step() == args.die_at:
            print("REPLICA_KILLED " + repr(time.time()), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        loss.backward()
        before = manager.current_step()
        opt.step()  # torchft commits the step only when every participant's allreduce worked
        log.append({"step": manager.current_step(),
                    "committed": manager.current_step() > before,
                    "participants": manager.num_participants(), "at": time.time(),
                    "loss": loss.item()})
        if (args.replacement and log[-1]["committed"] and log[-1]["participants"] == 2
                and stop_at() is None):
            with open(stop_file + ".tmp", "w") as f:
                f.write(str(max(args.steps, manager.current_step() + args.together)))
            os.replace(stop_file + ".tmp", stop_file)
    weights = torch.cat([p.detach().cpu().flatten() for p in model.parameters()])
    print("REPLICA " + json.dumps({"replica": args.replica, "log": log,
                                   "weights": weights.tolist()}), flush=True)
    manager.shutdown(wait=False)


def start(args, which: int, die_at=None, wait_go=False, replacement=False) -> subprocess.Popen:
    cmd = [sys.executable, os.path.abspath(__file__), "--replica", str(which),
           "--lighthouse", args.lighthouse, "--device", args.device, "--steps", str(args.steps),
           "--step-ms", str(args.step_ms), "--dir", args.dir, "--together", str(args.together)]
    if replacement:
        cmd += ["--replacement"]
    if die_at is not None:
        cmd += ["--die-at", str(die_at)]
    if wait_go:
        cmd += ["--wait-go"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["xdev", "cpu"])
    ap.add_argument("--steps", type=int, default=60,
                    help="at least this many steps in all")
    ap.add_argument("--kill-step", type=int, default=10)
    ap.add_argument("--step-ms", type=float, default=30.0)
    ap.add_argument("--replica", type=int, default=None)
    ap.add_argument("--lighthouse", default="")
    ap.add_argument("--die-at", type=int, default=None)
    ap.add_argument("--wait-go", action="store_true")
    ap.add_argument("--replacement", action="store_true")
    ap.add_argument("--dir", default="")
    ap.add_argument("--together", type=int, default=30,
                    help="steps both replicas commit after the replacement joined")
    ap.add_argument("--rejoin-after", type=float, default=1.0,
                    help="seconds between the kill and the replacement's start")
    args = ap.parse_args()
    if args.replica is not None:
        replica(args)
        return 0

    from torchft._torchft import LighthouseServer

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args.dir = tempfile.mkdtemp(prefix="xccl-torchft-")
    # A quorum forms once every replica that heartbeats has asked to join (up to 2 s): both
    # start in the first one; a dead replica stops heartbeating and is left out at once.
    # A replica that stops heartbeating for 0.5 s is out of the next quorum.
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=2000,
                                  heartbeat_timeout_ms=500)
    args.lighthouse = lighthouse.address()
    r0 = start(args, 0, wait_go=True)
    r1 = start(args, 1, die_at=args.kill_step, wait_go=True)
    for p in (r0, r1):
        while p.stdout.readline().strip() != "READY":
            pass
    for p in (r0, r1):
        p.stdin.write("go\n")
        p.stdin.flush()
    text1, _ = r1.communicate(timeout=300)
    killed_at = float(text1.split("REPLICA_KILLED ")[1].split()[0])
    first_exit = r1.returncode
    time.sleep(max(0.0, killed_at + args.rejoin_after - time.time()))
    r1b = start(args, 1, replacement=True)  # joins, heals from replica 0
    outs = {}
    for name, p in (("r0", r0), ("r1", r1b)):
        text, _ = p.communicate(timeout=300)
        for line in text.splitlines():
            if line.startswith("REPLICA "):
                outs[name] = json.loads(line[len("REPLICA "):])
    lighthouse.shutdown()
    log0 = outs["r0"]["log"]
    after = [e for e in log0 if e["at"] > killed_at and e["committed"]]
    alone = [e for e in log0 if e["committed"] and e["participants"] == 1]
    w0, w1 = outs["r0"]["weights"], outs["r1"]["weights"]
    result = {
        "device": args.device,
        "replica1_exit": first_exit,
        "seconds_kill_to_next_commit": after[0]["at"] - killed_at if after else None,
        "steps_committed_alone": len(alone),
        "replica1_steps_after_rejoin": sum(e["committed"] for e in outs["r1"]["log"]),
        "steps_together_after_rejoin": sum(e["committed"] and e["participants"] == 2
                                           and e["at"] > killed_at for e in log0),
        "final_step": [log0[-1]["step"], outs["r1"]["log"][-1]["step"]],
        "weights_equal": w0 == w1,
        "loss_first_last": [log0[0]["loss"], log0[-1]["loss"]],
    }
    result["ok"] = bool(first_exit == -signal.SIGKILL and after and alone
                        and result["steps_together_after_rejoin"] > 0 and result["weights_equal"])
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
