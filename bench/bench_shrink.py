"""From a SIGKILL to the survivors' first completed step: dist.shrink_group on xccl.

    python3 bench/bench_shrink.py --world 4 --trials 100 [--device xdev] [--bytes 1M]
    python3 bench/bench_shrink.py --world 4 --hosts 2 ...   # ranks on 2 namespace hosts (root)

Each trial: `--world` ranks run allreduces of `--bytes` back to back, each waited for (the
gradient sync of a training step; on xdev the stream is synchronised after each); one of them (trial t: rank t % world) SIGKILLs itself between two of its
calls, so the others are inside a collective that can never finish. Each survivor catches the
DistBackendError, finds the lost rank (torch_xccl.survivors.lost_ranks), shrinks the default
group (dist.shrink_group: xcclCommShrink, no store round) and completes one allreduce on it:
the latency of the trial is the last survivor's completion minus the victim's time of death
(wall clock, one host). Then, outside the timing, a replacement process takes the lost rank and
everyone forms the next trial's group. The launcher (this process) hosts the TCP store, as
torchrun's agent does, so losing rank 0 is a trial like the others.

--hosts H (root only): H hosts made of network namespaces on one bridge (tests/python/netns.py),
rank r on host r % H, so the survivors' collectives and the shrunk group's connections cross
TCP between hosts; the launcher runs inside host 0 (it hosts the store there) and the times
are still one clock (one kernel).

Writes bench/results/shrink_<device>_<world>[_<H>hosts].json: every trial's latency and the median,
90th percentile and worst.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    import torch_xccl

    store = dist.TCPStore(args.store_host, args.port, is_master=False,
                          timeout=datetime.timedelta(seconds=120))
    rank, world = args.rank, args.world
    if args.device == "xdev":
        torch.xdev.set_device(rank % torch.xdev.device_count())
        dev = torch.device("xdev", rank % torch.xdev.device_count())
    else:
        dev = torch.device("cpu")
    grad = torch.ones(args.bytes // 4, device=dev)
    for trial in range(args.first_trial, args.trials):
        dist.init_process_group("xccl", store=dist.PrefixStore(f"t{trial}", store), rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=60))
        victim = trial % world
        for _ in range(3):  # warm: every pair connected, every buffer made
            dist.all_reduce(grad)
        dist.barrier()
        if rank == victim:
            for _ in range(2):
                dist.all_reduce(grad)
            store.set(f"t{trial}/killed_at", repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            while True:  # a training step waits for its gradients before the next one
                dist.all_reduce(grad)
                if dev.type != "cpu":
                    torch.xdev.synchronize()
        except torch.distributed.DistBackendError:
            pass
        phases = {"raised": time.time()}
        lost = torch_xccl.survivors.lost_ranks(timeout=2.0)
        phases["probed"] = time.time()
        torch_xccl.survivors.shrink(exclude=lost)
        phases["shrunk"] = time.time()
        dist.all_reduce(grad)
        if dev.type != "cpu":
            grad.cpu()  # the step's result is on the host: complete
        done = time.time()
        store.set(f"t{trial}/done/{rank}", json.dumps({"at": done, "lost": lost, **phases}))
        dist.destroy_process_group()


def spawn(args, rank: int, first_trial: int) -> subprocess.Popen:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(rank),
           "--world", str(args.world), "--port", str(args.port), "--device", args.device,
           "--bytes", str(args.bytes), "--trials", str(args.trials),
           "--first-trial", str(first_trial), "--store-host", args.store_host]
    if args.netns:
        hosts = args.netns.split(",")
        cmd = ["ip", "netns", "exec", hosts[rank % len(hosts)], *cmd]
    return subprocess.Popen(cmd, stderr=subprocess.DEVNULL if not args.verbose else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--device", default="cpu", choices=["cpu", "xdev"])
    ap.add_argument("--bytes", type=util.parse_bytes, default=1 << 20)
    ap.add_argument("--out", default=None)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--hosts", type=int, default=1,
                    help="ranks spread over this many network-namespace hosts (root)")
    ap.add_argument("--netns", default="", help=argparse.SUPPRESS)  # the hosts, inside host 0
    ap.add_argument("--store-host", default="127.0.0.1", help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--first-trial", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0

    if args.hosts > 1 and not args.netns:
        # Make the hosts, then run this launcher again inside host 0 (where the store lives).
        util.use_test_helpers()
        import netns

        why = netns.available()
        if why:
            sys.exit(f"bench_shrink --hosts: {why}")
        os.environ.pop("XCCL_NODE_ID", None)  # the host identity comes from the namespace
        with netns.hosts(args.hosts, "S") as hs:
            argv = [a for a in sys.argv[1:]]
            cmd = [sys.executable, os.path.abspath(__file__), *argv,
                   "--netns", ",".join(h.name for h in hs), "--store-host", hs[0].addr]
            return hs[0].popen(cmd).wait()

    import torch.distributed as dist

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=300))
    args.port = store.port
    procs = {r: spawn(args, r, 0) for r in range(args.world)}
    trials = []
    for t in range(args.trials):
        victim = t % args.world
        killed_at = float(store.get(f"t{t}/killed_at"))
        done = [json.loads(store.get(f"t{t}/done/{r}")) for r in range(args.world) if r != victim]
        procs[victim].wait(timeout=60)
        trials.append({"trial": t, "victim": victim, "seconds": max(d["at"] for d in done) - killed_at,
                       "lost_seen": sorted({tuple(d["lost"]) for d in done}),
                       # the slowest survivor's phases, from the kill
                       "phases_ms": {k: round((max(d.get(k, d["at"]) for d in done) - killed_at)
                                              * 1000, 1)
                                     for k in ("raised", "probed", "shrunk", "at")}})
        print(f"trial {t}: rank {victim} killed, survivors stepped after "
              f"{trials[-1]['seconds'] * 1000:.1f} ms", flush=True)
        if t + 1 < args.trials:
            procs[victim] = spawn(args, victim, t + 1)  # the replacement, for the next trial
    for p in procs.values():
        p.wait(timeout=120)
    secs = sorted(x["seconds"] for x in trials)
    summary = {
        "device": args.device, "world": args.world, "bytes": args.bytes, "trials": len(secs),
        "median_ms": statistics.median(secs) * 1000,
        "p90_ms": secs[int(0.9 * (len(secs) - 1))] * 1000,
        "worst_ms": secs[-1] * 1000,
        "median_phase_ms": {k: statistics.median(x["phases_ms"][k] for x in trials)
                            for k in ("raised", "probed", "shrunk", "at")},
        "every_survivor_saw_the_victim": all(
            x["lost_seen"] == [(x["victim"],)] for x in trials),
        "runs": trials,
    }
    summary["hosts"] = args.hosts
    tag = f"_{args.hosts}hosts" if args.hosts > 1 else ""
    out = util.result_path(args.out, f"shrink_{args.device}_{args.world}{tag}")
    util.write_json(out, summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
