#!/usr/bin/env python3
"""Fault suite: random faults against small xccl jobs, every run's ending classified.

    python bench/fault_suite.py --runs 100 --seed 1 --keep-going      # a sweep
    python bench/fault_suite.py --runs 14 --scenarios kill,stop       # two scenarios only
    python bench/fault_suite.py --seed 1 --first 17 --runs 1          # replay run 17 of seed 1

Each run starts a fresh job of 2-4 ranks (real processes, bench/fault_suite_worker.py,
`init_process_group("xccl")`) on one transport: shared memory on one host ("shm"), TCP on
one host (XCCL_SHM_DISABLE=1, "tcp"), or two simulated hosts made of network namespaces
("netns", root and iproute2 only; ranks of one host use SHM, the hosts TCP). Every rank runs
the same random sequence of verified collectives through torch (all_reduce, broadcast, all_gather,
reduce_scatter, all_to_all, barrier, a send/recv ring by batch_isend_irecv or by isend +
irecv waited with wait(timeout) longer than the group's; 1 byte to --max-bytes; inputs are
small integers every rank can compute for every other, so every result is checked exactly)
and the run injects one fault. Each run also draws where the tensors live (--devices: cpu,
or xdev, where every collective is ordered on a stream and its result is read back with
.cpu(), so that an output a failed collective left unreduced would be caught as wrong) and,
per collective, how the program waits for it: the blocking call, async_op + wait(), or the
future's value. The fault:

  none      nothing: every rank must complete and verify everything
  late      a rank starts 2-6 s late, or sleeps 2-6 s before an operation: must succeed
  kill      SIGKILL of a random rank at a random operation (sometimes during init)
  stop      SIGSTOP of a random rank (alive, silent): heartbeats must fail the others;
            once they are gone the rank gets SIGCONT and must raise too
  absent    a rank sleeps in Python before operation k (alive, heartbeating, absent):
            the others must raise at the group timeout; woken, it must raise too
  cut       (netns) the link of one host cut with no reset: its switch port down, or a
            qdisc dropping every packet it sends; every rank must raise
  mismatch  one rank calls operation k with another dtype: every rank must raise a
            collective-mismatch error
  shrink    (not in the default mix: --scenarios shrink) SIGKILL of a random rank at a random
            operation, then the survivors continue: each must raise, find exactly that rank
            lost (torch_xccl.survivors.lost_ranks) and shrink the default group; they agree
            to resume where the new rank 0 failed (one survivor may have completed the op
            another failed: a broadcast's root, an allreduce whose last bytes it had) and
            run every remaining operation, verified exactly for the smaller world
            (docs/ELASTIC.md)

Outcomes, from every rank's events (a rank reports each operation before it issues it,
its verified completion, and any exception):

  ok          no-fault run: every rank completed and verified every operation
  raised      fault run: every surviving rank raised within the scenario's bound
  continued   shrink run: every survivor raised within the bound, shrank the victim away
              and completed and verified every remaining operation on the new group
  late        raised, but some rank beyond the bound
  unexpected  a no-fault run that raised; a fault run in which a survivor finished, crashed,
              raised before the fault or with a misleading error (mismatch), or returned
              from an operation it could not have completed: one that needs data from a
              rank that never issued it (killed, stopped or absent before it, or failed
              on an earlier one), that crossed a cut link after the cut, or that the
              other side called differently (mismatch)
  wrong       a rank returned a result that fails verification (a failure)
  hang        the suite had to kill a rank at the run's hard deadline (a failure)

Bounds (seconds from the fault to the exception): kill and mismatch 1 + slack; stop and cut
(XCCL_HEARTBEAT_MS + XCCL_HEARTBEAT_TIMEOUT_MS) / 1000 + slack; absent and a kill during
init the group timeout + slack; a resumed stopped or absent rank: the heartbeat bound from
SIGCONT / waking. Writes every run (seed, scenario, world, transport, outcome, per rank the
detection time and first error line) to --json, logs of runs that are not ok/raised under
--logs, prints a table of scenario x outcome with detection times, and exits non-zero on
any hang, wrong or unexpected outcome. Runs are sequential by default (--jobs 1): the
bounds are timings. Every process is killed (its process group) and every namespace
deleted at the end of its run, on a failure and on Ctrl-C.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
from bench.fault_suite_worker import EV  # noqa: E402  (the event lines' prefix)

util.use_test_helpers()  # netns, the tests' namespace helper

SCENARIOS = ["none", "late", "kill", "stop", "absent", "cut", "mismatch"]
# Not in the default mix (a seed's earlier runs replay unchanged): ask for them by name.
EXTRA_SCENARIOS = ["shrink"]
OUTCOMES = ["ok", "raised", "continued", "late", "unexpected", "wrong", "hang", "invalid"]
FAILURES = {"unexpected", "wrong", "hang", "invalid"}
KINDS = ["allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier",
         "sendrecv"]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8"]
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4,
            "int64": 8, "int8": 1, "uint8": 1}
# a mismatch error names both calls: "collective mismatch: rank 0 called ..., rank 1 called
# ...", or for send/recv "this rank called recv(int8, 4), rank 1 called send(int32, 4) (the
# dtypes differ)"
MISMATCH_WORDS = re.compile(r"mismatch|\(the dtypes differ\)")


# ====================================================================== planning

def draw_op(rng: random.Random, world: int, max_bytes: int) -> dict:
    kind = rng.choice(KINDS)
    dtype = rng.choice(DTYPES)
    u = rng.random()  # mostly small, some medium, a few up to max_bytes (log-uniform)
    lo, hi = (1, 4096) if u < 0.55 else ((4096, 256 << 10) if u < 0.9 else (256 << 10, max_bytes))
    hi = max(lo + 1, min(hi, max_bytes))
    nbytes = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    numel = max(1, nbytes // ITEMSIZE[dtype])
    if kind in ("allgather", "reduce_scatter", "alltoall"):
        numel = max(1, numel // world)  # per-rank block
    op = {"kind": kind, "dtype": dtype, "numel": numel, "root": rng.randrange(world),
          "op": rng.choice(["sum", "max", "min"])}
    if kind == "sendrecv":  # batch_isend_irecv, or isend + irecv with wait(timeout)
        op["style"] = rng.choice(["batch", "pair"])
    return op


def scenario_of(seed: int, index: int, scenarios: list[str]) -> str:
    """Balanced and random: each block of len(scenarios) runs has each scenario once."""
    block = list(scenarios)
    random.Random(f"{seed}/order/{index // len(block)}").shuffle(block)
    return block[index % len(block)]


def plan(seed: int, index: int, args, transports: list[str]) -> dict:
    """Everything about run `index` of `seed` that is drawn (the fault's timing is not)."""
    sc = scenario_of(seed, index, args.scenarios)
    rng = random.Random(f"{seed}/{index}")
    world = rng.choice(args.world_sizes)
    transport = "netns" if sc == "cut" else rng.choice(transports)
    hosts = []
    if transport == "netns":  # each of the two hosts holds at least one rank
        hosts = [0] + [1] + [rng.randrange(2) for _ in range(world - 2)]
        rng.shuffle(hosts)
    bounded = sc in ("none", "late", "mismatch", "shrink")
    ops = [draw_op(rng, world, args.max_bytes) for _ in range(rng.randint(12, 30))]
    if bounded:
        ops.append({"kind": "barrier", "dtype": "float32", "numel": 1, "root": 0, "op": "sum"})
    fault = {"kind": sc}
    victim = rng.randrange(world)
    if sc == "late":
        fault.update(rank=victim, delay_s=round(rng.uniform(2.0, 6.0), 2),
                     kind="late_start" if rng.random() < 0.6 else "late_op",
                     op=rng.randrange(len(ops)))
    elif sc in ("kill", "stop", "shrink"):
        if sc == "shrink" and transport == "netns":
            victim = 1 + rng.randrange(world - 1)  # rank 0 hosts the store there
        during_init = sc == "kill" and rng.random() < 0.15
        # A shrink run's operations end (bounded): its fault must come before the last one.
        last = min(16, len(ops) - 1) if sc == "shrink" else 16
        fault.update(rank=victim, op=-1 if during_init else rng.randrange(0, last),
                     delay_ms=(round(rng.uniform(0, 1000)) if during_init else
                               (0 if rng.random() < 0.4 else round(rng.uniform(0, 30), 1))))
    elif sc == "absent":
        fault.update(rank=victim, op=rng.randrange(0, 12))
    elif sc == "cut":
        fault.update(how=rng.choice(["port-down", "drop-all"]), host=rng.randrange(2),
                     op=rng.randrange(0, 16), delay_ms=round(rng.uniform(0, 30), 1))
    elif sc == "mismatch":
        k = rng.choice([i for i, o in enumerate(ops[:-1]) if o["kind"] != "barrier"] or [0])
        if ops[k]["kind"] == "barrier":  # every op drawn was a barrier: make one an allreduce
            ops[k] = dict(ops[k], kind="allreduce")
        fault.update(rank=victim, op=k,
                     dtype=rng.choice([d for d in DTYPES if d != ops[k]["dtype"]]))
    # Where the tensors live and how each operation is waited for, from a stream of its own
    # so that the runs of a seed drawn before these existed replay unchanged otherwise.
    drng = random.Random(f"{seed}/{index}/device")
    device = drng.choice(args.devices)
    for o in ops:
        o["wait"] = drng.choice(["sync", "async", "future"]) if o["kind"] not in (
            "barrier", "sendrecv") else "sync"
        if device != "cpu" and o["kind"] == "sendrecv":
            # On a device stream separate isend and irecv keep the stream's order, as NCCL's
            # do: a ring of them deadlocks once messages outgrow the transport's buffers, on
            # NCCL too (docs/PLUGIN.md). A correct program batches them.
            o["style"] = "batch"
    return {"index": index, "seed": seed, "scenario": sc, "world": world, "device": device,
            "transport": transport, "hosts": hosts, "bounded": bounded, "ops": ops,
            "fault": fault, "salt": rng.randrange(1 << 20),
            "pg_timeout": args.absent_timeout if sc == "absent" else args.pg_timeout}


def bound_of(spec: dict, args) -> float:
    hb = (args.hb_ms + args.hb_timeout_ms) / 1000.0
    f = spec["fault"]
    if spec["scenario"] == "absent" or (spec["scenario"] == "kill" and f["op"] < 0):
        return spec["pg_timeout"] + args.slack
    if spec["scenario"] in ("stop", "cut"):
        return hb + args.slack
    return 1.0 + args.slack  # kill, mismatch


# ====================================================================== running a job

STOP = threading.Event()  # set on Ctrl-C / SIGTERM: every run stops and cleans up
LIVE: set = set()  # every started rank, for the last-resort cleanup
LIVE_LOCK = threading.Lock()


class Interrupted(Exception):
    pass


class Rank:
    def __init__(self, rank: int, cond: threading.Condition):
        self.rank = rank
        self.cond = cond
        self.proc = None
        self.events: list[dict] = []
        self.log: list[str] = []
        self.eof = False
        self.killed = False  # by the suite at a deadline
        self.reader = None

    def start(self, cmd, env, popen=subprocess.Popen) -> None:
        self.proc = popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, bufsize=1,
                          start_new_session=True)  # its own process group, killed whole
        with LIVE_LOCK:
            LIVE.add(self)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            ev = None
            if line.startswith(EV):
                with contextlib.suppress(ValueError):
                    ev = json.loads(line[len(EV):])
            with self.cond:
                if ev is not None:
                    self.events.append(ev)
                elif len(self.log) < 5000:
                    self.log.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def find(self, ev: str, pred=None):
        return next((e for e in self.events if e["ev"] == ev and (pred is None or pred(e))),
                    None)

    @property
    def pid(self):
        e = self.find("pid")
        return e["pid"] if e else (self.proc.pid if self.proc else None)

    @property
    def finished(self) -> bool:
        return self.proc is not None and self.eof and self.proc.poll() is not None

    def signal(self, sig) -> None:
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(self.pid, sig)

    def dump_stacks(self) -> None:
        """Before a hung rank is killed: its Python stacks (SIGUSR1, faulthandler in the
        worker) and, where gdb is installed, every thread's native stack, into its log."""
        self.signal(signal.SIGUSR1)
        time.sleep(0.5)
        if shutil.which("gdb") is None or self.pid is None:
            return
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            p = subprocess.run(["gdb", "-p", str(self.pid), "-batch", "-nx",
                                "-ex", "thread apply all bt"],
                               capture_output=True, text=True, timeout=60)
            with self.cond:
                self.log.append("---- gdb: thread apply all bt")
                self.log.extend(p.stdout.splitlines()[-400:])

    def kill(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.reader is not None:
            self.reader.join(5)
        with LIVE_LOCK:
            LIVE.discard(self)


def wait_until(cond: threading.Condition, pred, deadline: float) -> bool:
    """Waits until pred() (checked under cond) or the deadline; False at the deadline."""
    with cond:
        while not pred():
            if STOP.is_set():
                raise Interrupted()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            cond.wait(min(left, 0.25))
    return True


def rank_env(spec: dict, rank: int, master: str, port: int, args) -> dict:
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(spec["world"]), MASTER_ADDR=master,
               MASTER_PORT=str(port), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               XCCL_HEARTBEAT_MS=str(args.hb_ms),
               XCCL_HEARTBEAT_TIMEOUT_MS=str(args.hb_timeout_ms),
               FAULT_SUITE_SPEC=json.dumps(spec), FAULT_SUITE_PARENT=str(os.getpid()))
    env.pop("XCCL_NODE_ID", None)  # the host identity must come from the namespace
    if spec["transport"] == "tcp":
        env["XCCL_SHM_DISABLE"] = "1"
    else:
        env.pop("XCCL_SHM_DISABLE", None)
    if agent_store(spec):  # every rank a client of the suite's store, as under torchrun
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    else:
        env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    return env


def agent_store(spec: dict) -> bool:
    """"shrink" runs on one host keep the store in the suite's process, as torchrun's agent
    does: torch's shrink_group clones the group's store, which a lost rank 0 would have taken
    with it (docs/ELASTIC.md). Between namespace hosts rank 0 hosts it and is never the
    victim (plan)."""
    return spec["scenario"] == "shrink" and spec["transport"] != "netns"


def inject(spec: dict, victim: Rank | None, hs) -> None:
    f = spec["fault"]
    if spec["scenario"] in ("kill", "shrink"):
        victim.signal(signal.SIGKILL)
    elif spec["scenario"] == "stop":
        victim.signal(signal.SIGSTOP)
    elif spec["scenario"] == "cut":
        h = hs[f["host"]]
        if f["how"] == "port-down":  # the cable pulled at the switch: no reset reaches anyone
            sw = h.name[:-1] + "sw"  # netns.hosts names the switch <base>sw
            cmd = ["ip", "-n", sw, "link", "set", "s" + h.iface[1:], "down"]
        else:  # every packet the host sends dropped (tbf whose bucket holds no packet)
            cmd = ["ip", "netns", "exec", h.name, "tc", "qdisc", "add", "dev", h.iface,
                   "root", "tbf", "rate", "8bit", "burst", "1", "limit", "1"]
        subprocess.run(cmd, check=True, capture_output=True, timeout=20)


def trigger(spec: dict, ranks: list[Rank], cond, deadline: float):
    """Waits for the fault's moment; returns why it could not come, or None."""
    f = spec["fault"]
    who = ranks[f["rank"]] if "rank" in f else ranks[0]  # cut: when rank 0 reaches op k
    if f["op"] < 0:
        ready = lambda: who.find("init_start") is not None  # noqa: E731
    else:
        ready = lambda: who.find("op", lambda e: e["i"] >= f["op"]) is not None  # noqa: E731

    def failed():
        return [r.rank for r in ranks if r.eof or r.find("raised") or r.find("done")]

    if not wait_until(cond, lambda: ready() or failed(), deadline):
        return "the fault's moment never came (a rank is stuck before it)"
    if failed() and not ready():
        return f"rank(s) {failed()} ended before the fault"
    end = time.monotonic() + f.get("delay_ms", 0) / 1000.0
    if end - time.monotonic() > 0.002:
        wait_until(cond, lambda: False, end - 0.002)
    while time.monotonic() < end:  # the last 2 ms spun: the moment stays precise
        pass
    return None


def start_ranks(spec, ranks, hs, port, args, cond) -> None:
    f = spec["fault"]
    master = hs[spec["hosts"][0]].addr if hs else "127.0.0.1"
    cmd = [sys.executable, "-u", os.path.join(util.BENCH, "fault_suite_worker.py")]
    late = f["rank"] if f["kind"] == "late_start" else None
    for r in ranks:
        if r.rank != late:
            r.start(cmd, rank_env(spec, r.rank, master, port, args),
                    hs[spec["hosts"][r.rank]].popen if hs else subprocess.Popen)
    if late is not None:
        wait_until(cond, lambda: False, time.monotonic() + f["delay_s"])
        r = ranks[late]
        r.start(cmd, rank_env(spec, late, master, port, args),
                hs[spec["hosts"][late]].popen if hs else subprocess.Popen)


def orchestrate(spec: dict, ranks: list[Rank], hs, args) -> dict:
    """Runs the job and its fault; returns the timeline (fault and resume times)."""
    cond = ranks[0].cond
    sc, f = spec["scenario"], spec["fault"]
    tl = {"t_start": time.monotonic(), "injected": False}
    port = 29500 if hs else util.free_port()
    if agent_store(spec):
        import torch.distributed as dist  # only these runs pay for the import

        tl["store"] = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    start_ranks(spec, ranks, hs, port, args, cond)
    victim = ranks[f["rank"]] if sc in ("kill", "stop", "absent", "shrink") else None
    survivors = [r for r in ranks if r is not victim]
    bound = bound_of(spec, args)
    if sc in ("kill", "stop", "cut", "shrink"):
        why = trigger(spec, ranks, cond, time.monotonic() + args.run_timeout)
        if why:
            tl["not_injected"] = why
        else:
            tl["t_fault"] = time.monotonic()
            inject(spec, victim, hs)
            tl["t_fault_done"] = time.monotonic()
            tl["injected"] = True
    if sc == "absent":
        wait_until(cond, lambda: victim.find("absent") or all(r.finished for r in survivors),
                   time.monotonic() + args.run_timeout)
        ev = victim.find("absent")
        if ev:
            tl.update(t_fault=ev["t"], t_fault_done=ev["t"], injected=True)
    if tl["injected"] and sc == "shrink":  # the survivors go on with the rest of the ops
        deadline = tl["t_fault"] + args.run_timeout
    elif tl["injected"]:
        deadline = tl["t_fault"] + bound + args.hard_margin
    else:
        deadline = tl["t_start"] + args.run_timeout
    if not wait_until(cond, lambda: all(r.finished for r in survivors), deadline):
        for r in survivors:
            if not r.finished:
                r.killed = True
                if args.stacks:
                    r.dump_stacks()
                r.kill()
        return tl
    if sc in ("stop", "absent") and tl["injected"] and not victim.finished:
        # the others are gone: the straggler, back, must raise as well
        tl["t_resume"] = time.monotonic()
        if sc == "stop":
            victim.signal(signal.SIGCONT)
        else:
            with contextlib.suppress(OSError, ValueError):
                victim.proc.stdin.write("go\n")
                victim.proc.stdin.flush()
        limit = tl["t_resume"] + (args.hb_ms + args.hb_timeout_ms) / 1000 + args.slack
        if not wait_until(cond, lambda: victim.finished, limit + args.hard_margin):
            victim.killed = True
            if args.stacks:
                victim.dump_stacks()
    return tl


def execute(spec: dict, args) -> dict:
    cond = threading.Condition()
    ranks = [Rank(r, cond) for r in range(spec["world"])]
    with contextlib.ExitStack() as stack:
        hs = None
        if spec["transport"] == "netns":
            import netns

            hs = stack.enter_context(netns.hosts(2, tag=f"F{spec['index']}"))
        try:
            tl = orchestrate(spec, ranks, hs, args)
        finally:
            for r in ranks:
                if r.proc is not None and r.proc.poll() is None:
                    r.signal(signal.SIGCONT)
                r.kill()
    return classify(spec, ranks, tl, args)


# ====================================================================== classification

def depends(op: dict, s: int, f: int, world: int) -> bool:
    """Whether rank s's result of `op` needs data from rank f."""
    if op["kind"] == "broadcast":
        return f == op["root"]
    if op["kind"] == "sendrecv":
        return f == (s - 1) % world
    return True  # allreduce, allgather, reduce_scatter, alltoall, barrier


def last_issued(r: Rank, before: float | None) -> int:
    ops = [e["i"] for e in r.events if e["ev"] == "op" and (before is None or e["t"] < before)]
    return max(ops, default=-1)


def availability(spec: dict, ranks: list[Rank], tl: dict) -> dict:
    """(f, s) -> the last operation whose data rank f can have delivered to rank s."""
    world, sc, f = spec["world"], spec["scenario"], spec["fault"]
    avail = {}

    def cap(src, dst, i):
        avail[(src, dst)] = min(avail.get((src, dst), i), i)

    for r in ranks:
        ev = r.find("raised")
        if ev is not None:  # a rank that failed operation i never issues i + 1
            for s in range(world):
                cap(r.rank, s, ev["i"])
    if not tl.get("injected"):
        return avail
    if sc in ("kill", "stop", "absent", "shrink"):
        v = ranks[f["rank"]]
        j = last_issued(v, tl.get("t_resume"))
        if sc == "absent":
            j = min(j, f["op"] - 1)
        for s in range(world):
            cap(v.rank, s, j)
    elif sc == "cut":
        cut = f["host"]
        for r in ranks:
            for s in ranks:
                h_src, h_dst = spec["hosts"][r.rank], spec["hosts"][s.rank]
                crosses = h_src != h_dst and (f["how"] == "port-down" or h_src == cut)
                if crosses:  # what r issued after the cut can never reach s
                    cap(r.rank, s.rank, last_issued(r, tl["t_fault_done"]))
    return avail


def impossible(spec: dict, ranks: list[Rank], tl: dict) -> list[str]:
    """Completions a rank cannot honestly have made (see the module docstring)."""
    world, ops, f = spec["world"], spec["ops"], spec["fault"]
    avail = availability(spec, ranks, tl)
    out = []
    for s in ranks:
        for e in s.events:
            if e["ev"] not in ("ok", "wrong") or e.get("s"):
                continue  # (after a shrink: on the new group, verified exactly)
            i = e["i"]
            op = ops[i % len(ops)]
            for src in range(world):
                if src == s.rank or not depends(op, s.rank, src, world):
                    continue
                if i > avail.get((src, s.rank), math.inf):
                    out.append(f"rank {s.rank} completed op {i} ({op['kind']}), which needs "
                               f"rank {src}'s data, but rank {src} could deliver nothing after "
                               f"op {avail[(src, s.rank)]}")
                    break
                if (spec["scenario"] == "mismatch" and i == f["op"]
                        and f["rank"] in (s.rank, src)):
                    out.append(f"rank {s.rank} completed op {i} ({op['kind']}), which needs "
                               f"rank {src}'s data, but rank {src} called it with another "
                               f"dtype ({f['dtype']} vs {op['dtype']})")
                    break
    return out


def rank_record(spec: dict, r: Rank, tl: dict, t_ref: float | None) -> dict:
    raised = r.find("raised")
    rec = {"rank": r.rank, "exit": r.proc.returncode if r.proc else None,
           "ops_ok": sum(e["ev"] == "ok" for e in r.events),
           "last_op": last_issued(r, None), "killed_by_suite": r.killed}
    if spec["hosts"]:
        rec["host"] = spec["hosts"][r.rank]
    if raised is not None:
        ref = tl.get("t_resume") if ("t_resume" in tl and r.rank == spec["fault"].get("rank")) \
            else t_ref
        rec.update(raised_op=raised["i"], in_op_s=round(raised["elapsed"], 3),
                   error_type=raised["type"], error=raised["msg"], error_text=raised["text"])
        if ref is not None:
            rec["detect_s"] = round(max(0.0, raised["t"] - ref), 3)
    shrunk = r.find("shrunk")
    if shrunk is not None:
        rec.update(shrink_s=round(shrunk["elapsed"], 3), lost=shrunk["lost"],
                   resume_op=shrunk["resume"],
                   ops_after_shrink=sum(e["ev"] == "ok" and bool(e.get("s")) for e in r.events))
    if r.find("shrink_failed"):
        rec["shrink_failed"] = r.find("shrink_failed")["msg"]
    wrong = [e for e in r.events if e["ev"] == "wrong"]
    if wrong:
        rec["wrong"] = [f"op {e['i']}: {e['detail']}" for e in wrong[:5]]
    if r.find("import_error"):
        rec["import_error"] = r.find("import_error")["msg"]
    build = r.find("build")
    if build:
        rec["build"] = {k: v for k, v in build.items() if k not in ("ev", "t")}
    return rec


def reference_time(spec: dict, ranks: list[Rank], tl: dict) -> float | None:
    if spec["scenario"] == "mismatch":  # found once every rank has issued op k
        k = spec["fault"]["op"]
        ts = [e["t"] for r in ranks for e in r.events if e["ev"] == "op" and e["i"] == k]
        return max(ts) if ts else None
    return tl.get("t_fault")


def classify(spec: dict, ranks: list[Rank], tl: dict, args) -> dict:
    sc, f = spec["scenario"], spec["fault"]
    if sc == "mismatch":  # the fault is the bad rank's call of op k
        tl["injected"] = ranks[f["rank"]].find("op", lambda e: e["i"] == f["op"]) is not None
    t_ref = reference_time(spec, ranks, tl)
    recs = [rank_record(spec, r, tl, t_ref) for r in ranks]
    bound = bound_of(spec, args)
    resume_bound = (args.hb_ms + args.hb_timeout_ms) / 1000 + args.slack
    victim = f.get("rank") if sc in ("kill", "stop", "absent", "shrink") else None
    why = {k: [] for k in OUTCOMES}
    for rec in recs:
        if "import_error" in rec:
            why["invalid"].append(f"rank {rec['rank']}: {rec['import_error']}")
        if rec["killed_by_suite"]:
            r = ranks[rec["rank"]]
            last = r.events[-1] if r.events else {"ev": "none"}
            where = "after raising (destroy/exit)" if "raised_op" in rec else \
                f"last event {last['ev']} {last.get('i', '')}".rstrip()
            why["hang"].append(f"rank {rec['rank']} still running at the deadline, {where}")
        for w in rec.get("wrong", []):
            why["wrong"].append(f"rank {rec['rank']} {w}")
    if sc in ("none", "late"):
        for rec in recs:
            if "raised_op" in rec:
                why["unexpected"].append(f"rank {rec['rank']} raised at op {rec['raised_op']}: "
                                         f"{rec['error']}")
            elif rec["exit"] != 0 and not rec["killed_by_suite"] and "import_error" not in rec:
                why["unexpected"].append(f"rank {rec['rank']} exited {rec['exit']}")
    else:
        if tl.get("not_injected") and not why["hang"]:
            why["unexpected"].append(tl["not_injected"])
        for rec in recs:
            r, victim_here = rec["rank"], rec["rank"] == victim
            if rec["killed_by_suite"] or "import_error" in rec or \
                    (victim_here and sc in ("kill", "shrink")):
                continue
            if sc == "shrink" and tl.get("injected"):  # raise, shrink away the victim, finish
                if "shrink_failed" in rec:
                    why["unexpected"].append(f"rank {r}: shrink failed: {rec['shrink_failed']}")
                elif rec.get("lost") != [victim]:
                    why["unexpected"].append(f"rank {r} found lost {rec.get('lost')}, not "
                                             f"[{victim}]")
                elif not ranks[r].find("done"):
                    why["unexpected"].append(f"rank {r} did not finish after the shrink")
            if "raised_op" not in rec:
                what = "completed the workload" if ranks[r].find("done") else \
                    f"exited {rec['exit']} without raising"
                if victim_here and "t_resume" not in tl:
                    continue  # never resumed: the others hung first
                why["unexpected"].append(f"rank {r} {what}")
                continue
            raised_t = ranks[r].find("raised")["t"]
            if tl.get("injected") and t_ref is not None and raised_t < t_ref \
                    and sc != "mismatch":
                why["unexpected"].append(f"rank {r} raised before the fault: {rec['error']}")
            if sc == "mismatch" and not MISMATCH_WORDS.search(rec["error_text"]):
                why["unexpected"].append(f"rank {r}'s error does not name the mismatch: "
                                         f"{rec['error']}")
            limit = resume_bound if (victim_here and "t_resume" in tl) else bound
            if rec.get("detect_s", 0) > limit:
                why["late"].append(f"rank {r} raised after {rec['detect_s']} s "
                                   f"(bound {limit:.1f} s)")
        why["unexpected"] += impossible(spec, ranks, tl)
    outcome = next((k for k in ("invalid", "hang", "wrong", "unexpected", "late") if why[k]),
                   "ok" if sc in ("none", "late") else
                   "continued" if sc == "shrink" else "raised")
    survivors = [rec for rec in recs if rec["rank"] != victim]
    detect = [rec["detect_s"] for rec in survivors if "detect_s" in rec]
    rec = {k: spec.get(k) for k in ("index", "seed", "scenario", "world", "transport", "device")}
    rec.update(fault=dict(f),
               hosts=spec["hosts"], ops=spec["ops"], outcome=outcome,
               reasons=[m for k in ("invalid", "hang", "wrong", "unexpected", "late")
                        for m in why[k]],
               bound_s=round(bound, 2), injected=tl.get("injected", False),
               detect_max_s=max(detect) if detect else None, ranks=recs,
               duration_s=round(time.monotonic() - tl["t_start"], 2))
    if f.get("op", -1) >= 0 and sc in ("kill", "stop", "cut", "absent", "mismatch", "shrink"):
        rec["fault_op"] = f["op"]
    rec["_logs"] = {r.rank: r.log + [EV + json.dumps(e) for e in r.events] for r in ranks}
    return rec


# ====================================================================== reporting

def short(rec: dict) -> str:
    f = rec["fault"]
    what = {"kill": "SIGKILL", "shrink": "SIGKILL, shrink", "stop": "SIGSTOP", "absent": "absent",
            "mismatch": f"dtype {f.get('dtype')}", "cut": f.get("how", ""), "none": "no fault",
            "late_start": f"starts {f.get('delay_s')} s late",
            "late_op": f"sleeps {f.get('delay_s')} s"}[f["kind"]]
    if "rank" in f and f["kind"] != "none":
        what += f" rank {f['rank']}"
    if f["kind"] == "cut":
        what += f" host {f['host']}"
    if "op" in f and f["kind"] not in ("none", "late_start"):
        what += " in init" if f["op"] < 0 else f" at op {f['op']}"
    det = "" if rec["detect_max_s"] is None else f"  detect max {rec['detect_max_s']:.2f} s"
    return (f"run {rec['index']:4d} {rec['scenario']:8s} w={rec['world']} "
            f"{rec['transport']:5s} {rec.get('device') or 'cpu':4s} {what:34s} -> "
            f"{rec['outcome']:10s}{det} "
            f"({rec['duration_s']:.1f} s)")


def summarize(records: list[dict], scenarios: list[str]) -> str:
    lines = []
    cols = OUTCOMES
    head = f"{'scenario':10s}" + "".join(f"{c:>11s}" for c in cols) + \
        f"{'runs':>6s}   detection s (min / median / max, over ranks)"
    lines += [head, "-" * len(head)]
    for sc in scenarios + ["all"]:
        rs = [r for r in records if sc == "all" or r["scenario"] == sc]
        if not rs:
            continue
        counts = "".join(f"{sum(r['outcome'] == c for r in rs):>11d}" for c in cols)
        victim_ok = lambda r, rr: rr["rank"] != r["fault"].get("rank") or \
            r["scenario"] in ("cut", "mismatch")  # noqa: E731
        det = [rr["detect_s"] for r in rs for rr in r["ranks"]
               if "detect_s" in rr and victim_ok(r, rr)]
        dtxt = (f"{min(det):.2f} / {statistics.median(det):.2f} / {max(det):.2f}"
                if det else "-")
        lines.append(f"{sc:10s}{counts}{len(rs):>6d}   {dtxt}")
    trs = sorted({r["transport"] for r in records})
    lines.append("")
    lines.append("by transport: " + ", ".join(
        f"{t} {sum(r['transport'] == t for r in records)} runs "
        f"({sum(r['transport'] == t and r['outcome'] in FAILURES for r in records)} failed)"
        for t in trs))
    devs = sorted({r.get("device") or "cpu" for r in records})
    lines.append("by device: " + ", ".join(
        f"{d} {sum((r.get('device') or 'cpu') == d for r in records)} runs "
        f"({sum((r.get('device') or 'cpu') == d and r['outcome'] in FAILURES for r in records)}"
        " failed)" for d in devs))
    return "\n".join(lines)


def write_logs(rec: dict, logdir: str) -> str:
    d = os.path.join(logdir, f"seed{rec['seed']}-run{rec['index']}-{rec['scenario']}")
    os.makedirs(d, exist_ok=True)
    for r, lines in rec["_logs"].items():
        with open(os.path.join(d, f"rank{r}.log"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
    with open(os.path.join(d, "run.json"), "w") as fh:
        json.dump({k: v for k, v in rec.items() if k != "_logs"}, fh, indent=1)
    return d


# ====================================================================== main

def available_transports(want: list[str]) -> tuple[list[str], str]:
    import netns

    why = netns.available()
    if why and "netns" in want:
        return [t for t in want if t != "netns"], why
    return list(want), ""


def cleanup_everything() -> None:
    with LIVE_LOCK:
        live = list(LIVE)
    for r in live:
        with contextlib.suppress(Exception):
            r.signal(signal.SIGCONT)
            r.kill()


def run_all(args, transports: list[str], records: list[dict]) -> list[dict]:
    """Appends each finished run to records (the caller's list: an interrupt keeps them)."""
    specs = (plan(args.seed, i, args, transports)
             for i in range(args.first, args.first + args.runs))
    stop_early = False

    def one(spec):
        if stop_early or STOP.is_set():
            return None
        return execute(spec, args)

    def report(rec):
        nonlocal stop_early
        if rec is None:
            return
        if args.logs and (args.all_logs or rec["outcome"] not in ("ok", "raised")):
            rec["logs"] = write_logs(rec, args.logs)
        records.append(rec)
        if not args.quiet:
            print(short(rec), flush=True)
            for m in rec["reasons"][:6]:
                print(f"        {m}", flush=True)
        if rec["outcome"] in FAILURES and not args.keep_going:
            stop_early = True

    if args.jobs <= 1:
        for spec in specs:
            if stop_early:
                break
            report(one(spec))
    else:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
            for rec in ex.map(one, list(specs)):
                report(rec)
    return records


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0, help="index of the first run (replay)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="comma-separated subset of " + ",".join(SCENARIOS + EXTRA_SCENARIOS)
                    + " (the default: all but " + ",".join(EXTRA_SCENARIOS) + ")")
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--transports", default="shm,tcp,netns")
    ap.add_argument("--devices", default="cpu,xdev",
                    help="where the ranks' tensors live, drawn per run (xdev: every collective "
                         "ordered on a stream; its result read back with .cpu())")
    ap.add_argument("--max-bytes", type=util.parse_bytes, default=util.parse_bytes("4M"))
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (1: bounds are timings)")
    ap.add_argument("--keep-going", action="store_true", help="go on after a failed run")
    ap.add_argument("--pg-timeout", type=float, default=15.0, help="group timeout, s")
    ap.add_argument("--absent-timeout", type=float, default=10.0,
                    help="group timeout of the absent-rank runs, s")
    ap.add_argument("--hb-ms", type=int, default=200, help="XCCL_HEARTBEAT_MS")
    ap.add_argument("--hb-timeout-ms", type=int, default=2000, help="XCCL_HEARTBEAT_TIMEOUT_MS")
    ap.add_argument("--slack", type=float, default=4.0,
                    help="seconds added to every bound (a loaded 2-core machine)")
    ap.add_argument("--hard-margin", type=float, default=30.0,
                    help="seconds past a bound before a rank still running is killed (hang)")
    ap.add_argument("--run-timeout", type=float, default=120.0,
                    help="hard limit of a no-fault run, and of reaching a fault's moment")
    ap.add_argument("--json", default=os.path.join(util.RESULTS, "fault_suite.json"))
    ap.add_argument("--logs", default=os.path.join(util.RESULTS, "fault_suite_logs"),
                    help="where logs of runs not ok/raised go ('' for nowhere)")
    ap.add_argument("--all-logs", action="store_true", help="keep the logs of every run")
    ap.add_argument("--no-stacks", dest="stacks", action="store_false",
                    help="do not dump a hung rank's stacks (Python; native with gdb) first")
    ap.add_argument("--quiet", action="store_true", help="no line per run")
    args = ap.parse_args(argv)
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    bad = [s for s in args.scenarios if s not in SCENARIOS + EXTRA_SCENARIOS]
    if bad or not args.scenarios:
        ap.error(f"unknown scenario(s) {bad}; choose from {SCENARIOS + EXTRA_SCENARIOS}")
    args.devices = [d for d in args.devices.split(",") if d]
    if not args.devices or any(d not in ("cpu", "xdev") for d in args.devices):
        ap.error(f"--devices: cpu and/or xdev, got {args.devices}")
    args.transports = [t for t in args.transports.split(",") if t]
    if any(t not in ("shm", "tcp", "netns") for t in args.transports):
        ap.error("transports: shm, tcp, netns")
    if any(not 2 <= w <= 4 for w in args.world_sizes):
        ap.error("world sizes: 2 to 4")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    transports, why = available_transports(args.transports)
    if why and "cut" in args.scenarios:
        print(f"skipping scenario 'cut': {why}", flush=True)
        args.scenarios = [s for s in args.scenarios if s != "cut"]
    if why and "netns" in args.transports:
        print(f"skipping transport 'netns': {why}", flush=True)
    if not transports or not args.scenarios:
        print("nothing to run", flush=True)
        return 2

    def on_term(signum, frame):
        STOP.set()
        raise KeyboardInterrupt()

    # also SIGINT: a shell that starts us in the background hands it down ignored
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_term)
    t0, load0 = time.time(), os.getloadavg()
    records = []
    interrupted = False
    try:
        run_all(args, transports, records)
    except (KeyboardInterrupt, Interrupted):
        STOP.set()
        interrupted = True
        print("interrupted: cleaning up", flush=True)
    finally:
        STOP.set()
        cleanup_everything()
    for rec in records:
        rec.pop("_logs", None)
    table = summarize(records, args.scenarios)
    counts = {o: sum(r["outcome"] == o for r in records) for o in OUTCOMES}
    print()
    print(f"fault suite: {len(records)} runs, seed {args.seed}, {time.time() - t0:.0f} s, "
          f"load average {load0[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(table)
    builds = sorted({json.dumps(k["build"], sort_keys=True) for r in records for k in r["ranks"]
                     if "build" in k})
    if len(builds) > 1:
        print(f"NOTE: the runs loaded {len(builds)} different builds of torch_xccl/libxccl "
              f"(rebuilt during the sweep): {', '.join(builds)}")
    failed = [r for r in records if r["outcome"] in FAILURES]
    for r in failed:
        print(f"FAILED {short(r)}")
        for m in r["reasons"][:6]:
            print(f"        {m}")
        if r.get("logs"):
            print(f"        logs: {r['logs']}")
    print(f"hang {counts['hang']}, wrong {counts['wrong']}, unexpected {counts['unexpected']}, "
          f"late {counts['late']}, invalid {counts['invalid']}")
    if args.json:
        meta = {"seed": args.seed, "first": args.first, "runs": len(records),
                "scenarios": args.scenarios, "transports": transports,
                "world_sizes": args.world_sizes, "max_bytes": args.max_bytes,
                "pg_timeout_s": args.pg_timeout, "absent_timeout_s": args.absent_timeout,
                "hb_ms": args.hb_ms, "hb_timeout_ms": args.hb_timeout_ms, "slack_s": args.slack,
                "cores": os.cpu_count(), "loadavg_start": load0, "loadavg_end": os.getloadavg(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0)),
                "duration_s": round(time.time() - t0, 1), "interrupted": interrupted,
                "builds": [json.loads(b) for b in builds]}
        util.write_json(args.json, {"meta": meta, "counts": counts, "table": table,
                                    "runs": records})
        print(f"wrote {args.json}")
    if interrupted:
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
