#!/usr/bin/env python3
"""Peer benchmark: float32 allreduce over gloo, xccl, DeepSpeed's CPU shared-memory allreduce
and Open MPI's MPI_Allreduce, in the same processes and the same run, against memcpy.

Systems (each rank holds all four at once):
  gloo       torch.distributed group with backend "gloo", dist.all_reduce in place
  xccl       the default torch.distributed group, backend "xccl" (torch_xccl), same call
  xccl_reg   the same call on a tensor made inside torch_xccl.peer_memory(min_bytes=1):
             registered host memory the ranks read in place (issue 27's "registered buffers")
  xccl_direct torch_xccl.direct.all_reduce(t) on the xccl_reg tensor: the same collective
             called straight into libxccl on the calling thread, no Work or dispatcher (the
             way DeepSpeed's inference_all_reduce is called; docs/PLUGIN.md, "Direct calls")
  xccl_solo  the same call on a group of one rank (each rank its own): no communication, so
             torch's dispatch and the backend's per-call work, the floor of the xccl rows
  torch_floor the same call on a group of one rank with torch's own FakeProcessGroup (backend
             "fake", torch.testing._internal.distributed.fake_pg): a backend that does nothing,
             so torch's dispatch alone; xccl_solo - torch_floor is xccl's own per-call work
  ds_shm     deepspeed.comm.inference_all_reduce with DS_ACCELERATOR=cpu: DeepSpeed's
             shared-memory op (csrc/cpu/comm/shm.cpp, JIT-built with ninja/g++). DeepSpeed
             takes it only when LOCAL_SIZE equals the world size and the op builds; this script
             checks that it did (op module loaded and initialised, every rank's /dev/shm
             segment present, the op called and torch.distributed.all_reduce not called) and
             does not time DeepSpeed at all, loudly, when it did not.
  mpi        Open MPI's MPI_Allreduce through mpi4py: comm.Allreduce(MPI.IN_PLACE, buf, SUM)
             on a numpy float32 buffer
plus the physical limit measured in the same run: single-thread copy of the same bytes
(numpy.copyto and torch copy_ with 1 thread, best of several), by rank 0 while the other
ranks sleep.

Method, per size: each system's result is checked once (exact expected values; a wrong
result marks the row WRONG and the exit status 1), warm-up, then ROUNDS rounds; in each round
every system runs ITERS back-to-back blocking allreduces after an MPI barrier, and the order
of the systems rotates by one each round. A round's time is the slowest rank's per-op mean;
the reported time is the median round. ITERS = clamp(round-bytes / size, min-iters, iters).
Every rank runs torch.set_num_threads(1) and OMP_NUM_THREADS=1 (DeepSpeed's op is OpenMP
code). Reported like nccl-tests: algbw = size / time, busbw = algbw * 2(n-1)/n, GB/s = 1e9 B/s.

Launch: the ranks are Open MPI processes (so that mpi4py can run MPI_Allreduce beside the
torch groups); torch.distributed is initialised from the MPI rank and size with env://,
MASTER_ADDR=127.0.0.1 and a free port chosen by rank 0 and broadcast over MPI. Run without
mpirun, the script re-executes itself under mpirun (with --bind-to none, like torchrun's
unbound ranks in bench_torch.py, and a hard timeout).

Usage:
  python bench/bench_peers.py                          # 2 ranks, 8 B .. 64 MiB, 7 rounds
  python bench/bench_peers.py --world-size 4 --name peers4
  python bench/bench_peers.py --max-bytes 16M --rounds 3 --name smoke
  mpirun --allow-run-as-root -np 2 --bind-to none python bench/bench_peers.py   # by hand
  python bench/bench_peers.py --plot-only bench/results/peers.json   # redraw the PNG
Installing the peers (benchmark-only; see bench/README.md, "Peer benchmark"):
  apt-get install openmpi-bin libopenmpi-dev
  pip install -c <(echo torch==2.13.0) --no-build-isolation mpi4py
  pip install -c <(echo torch==2.13.0) einops hjson msgpack psutil tqdm py-cpuinfo pydantic
  pip install --no-deps --no-build-isolation deepspeed
Output: a table on stdout, JSON in bench/results/<name>.json, plot in bench/peers_<n>ranks.png.
"""
import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback

UNDER_MPI = "OMPI_COMM_WORLD_SIZE" in os.environ

# Must precede importing torch (and DeepSpeed's OpenMP op, which reads OMP_NUM_THREADS when
# its own libgomp starts) and DeepSpeed (DS_ACCELERATOR picks its CPU accelerator).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
if UNDER_MPI:
    # DeepSpeed's shm op is enabled only when LOCAL_SIZE == world size (all ranks on a host).
    os.environ.setdefault("LOCAL_SIZE", os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", ""))

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
from bench import util  # noqa: E402
from bench.bench_torch import BUS_FACTOR, median, metadata  # noqa: E402

SYSTEMS = ["gloo", "xccl", "xccl_reg", "xccl_direct", "xccl_solo", "torch_floor", "ds_shm", "mpi"]
PEERS = ["gloo", "ds_shm", "mpi"]
DEFAULT_SIZES = "8,1K,64K,256K,1M,4M,16M,64M"
API = {
    "gloo": "torch.distributed.all_reduce(t, group=<gloo group>) (in place, CPU tensor)",
    "xccl": "torch.distributed.all_reduce(t) on the default group, backend 'xccl' (in place)",
    "xccl_reg": "the same call on a tensor made inside torch_xccl.peer_memory(min_bytes=1) "
                "(registered: memory the host's ranks map and read in place)",
    "xccl_direct": "torch_xccl.direct.all_reduce(t) on a peer_memory() tensor (no Work, "
                   "no dispatcher: one call into libxccl on this thread)",
    "xccl_solo": "the same call on a group of one rank, backend 'xccl' (no communication: "
                 "torch's and the backend's own per-call floor)",
    "torch_floor": "the same call on a group of one rank, torch's FakeProcessGroup (backend "
                   "'fake': no work at all, torch's dispatch alone)",
    "ds_shm": "deepspeed.comm.inference_all_reduce(t) -> torch.ops.deepspeed."
              "inference_all_reduce_ (DeepSpeed CPU shm op, in place)",
    "mpi": "mpi4py comm.Allreduce(MPI.IN_PLACE, numpy_buf, op=MPI.SUM) (Open MPI)",
}
# DeepSpeed's shm.cpp workspace: states + 2 x 1 MiB symmetric + 2 x 32 MiB distributed buffers.
DS_SHM_MIN_BYTES = 2 * (1 << 20) + 2 * 32 * (1 << 20)


# ----------------------------------------------------------------------------------------------
# launcher side

def relaunch_under_mpirun(a):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("mpirun not found: apt-get install openmpi-bin libopenmpi-dev "
                         "(see bench/README.md, 'Peer benchmark')")
    n = a.world_size
    cpus = len(os.sched_getaffinity(0))
    env = dict(os.environ, LOCAL_SIZE=str(n), OMP_NUM_THREADS=os.environ["OMP_NUM_THREADS"],
               DS_ACCELERATOR="cpu")
    cmd = [mpirun]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["-np", str(n), "--bind-to", "none"]
    if n > cpus:
        cmd.append("--oversubscribe")
    for var in ("LOCAL_SIZE", "OMP_NUM_THREADS", "DS_ACCELERATOR"):
        cmd += ["-x", var]
    cmd += [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    if "--name" not in sys.argv[1:]:
        cmd += ["--name", a.name]  # one name for all ranks
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    p = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        return p.wait(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        print(f"\nTIMED OUT after {a.timeout:.0f} s: killing mpirun and its ranks", flush=True)
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        return 124
    except KeyboardInterrupt:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait()
        return 130


# ----------------------------------------------------------------------------------------------
# memcpy: the physical limit, at every benchmark size

def memcpy_at_sizes(sizes, reps, budget=64 << 20, max_inner=20000):
    """Single-thread copy of each size: best over reps of a sample of `inner` copies
    (inner = clamp(budget / size, 1, max_inner)), torch copy_ and numpy.copyto; the same method
    as bench_torch.measure_memcpy, with the copy count capped so that 8 B does not take
    minutes. Returns rows with GB/s of bytes copied and the time of one copy."""
    rows = []
    for n in sizes:
        src = torch.ones(n, dtype=torch.uint8)
        dst = torch.empty(n, dtype=torch.uint8)
        nsrc, ndst = src.numpy(), dst.numpy()
        inner = max(1, min(max_inner, budget // n))
        best = {}
        fns = {"torch": lambda: dst.copy_(src), "numpy": lambda: np.copyto(ndst, nsrc)}
        for _ in range(reps):
            for name, fn in fns.items():
                fn()
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn()
                best[name] = min(best.get(name, math.inf), (time.perf_counter() - t0) / inner)
        t = min(best.values())
        rows.append({"bytes": n, "inner": inner,
                     "torch_GBps": n / best["torch"] / 1e9, "numpy_GBps": n / best["numpy"] / 1e9,
                     "best_GBps": n / t / 1e9, "time_us": t * 1e6})
    return rows


# ----------------------------------------------------------------------------------------------
# ranks

class Peers:
    """The four systems in one rank: init, per-size buffers, check, timed call."""

    def __init__(self, a, comm, MPI):
        import torch.distributed as dist
        self.a, self.comm, self.MPI, self.dist = a, comm, MPI, dist
        self.rank, self.n = comm.Get_rank(), comm.Get_size()
        port = comm.bcast(util.free_port() if self.rank == 0 else None, root=0)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(self.rank),
                          WORLD_SIZE=str(self.n),
                          LOCAL_RANK=os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", str(self.rank)))
        self.port = port
        import torch_xccl
        self.torch_xccl = torch_xccl
        to = datetime.timedelta(seconds=a.pg_timeout)
        dist.init_process_group("xccl", init_method="env://", rank=self.rank, world_size=self.n,
                                timeout=to)
        self.gloo = dist.new_group(backend="gloo", timeout=to)
        assert dist.get_backend() == "xccl" and torch_xccl.is_torch_xccl_backend(dist.group.WORLD)
        assert dist.get_backend(self.gloo) == "gloo"
        # every rank takes part in making each group of one; each keeps its own
        self.solo = None
        for i in range(self.n):
            g = dist.new_group([i], timeout=to)
            if i == self.rank:
                self.solo = g
        import torch.testing._internal.distributed.fake_pg  # noqa: F401  backend "fake"
        self.fake = None
        for i in range(self.n):
            g = dist.new_group([i], backend="fake", timeout=to)
            if i == self.rank:
                self.fake = g
        self.ds = None
        self.ds_check = self.init_deepspeed()

    # -- DeepSpeed -----------------------------------------------------------------------------
    def shm_segment(self, r):
        # shm.cpp names each rank's workspace "deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<r>"
        return (f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_"
                f"{os.environ['MASTER_ADDR']}_{os.environ['MASTER_PORT']}_{r}")

    def init_deepspeed(self):
        """deepspeed.comm over the already-initialised torch.distributed, then prove that its
        inference_all_reduce will take the shm op, not torch.distributed.all_reduce."""
        chk = {"LOCAL_SIZE": os.environ.get("LOCAL_SIZE"), "DS_ACCELERATOR":
               os.environ.get("DS_ACCELERATOR"), "world_size": self.n, "reasons": []}
        try:
            import deepspeed
            import deepspeed.comm as dscomm
            import deepspeed.comm.comm as dscomm_mod
            from deepspeed.accelerator import get_accelerator
            chk["deepspeed"] = deepspeed.__version__
            chk["accelerator"] = type(get_accelerator()).__name__
            dscomm.init_distributed(dist_backend="xccl", auto_mpi_discovery=False,
                                    verbose=False,
                                    timeout=datetime.timedelta(seconds=self.a.pg_timeout))
            cdb = dscomm_mod.cdb
            chk["cdb"] = type(cdb).__name__
            op = getattr(cdb, "shm_comm_op", None)
            chk["shm_op_loaded"] = op is not None
            chk["shm_op_module"] = getattr(op, "__file__", None)
            chk["vector_kernel_level"] = getattr(cdb, "shm_vector_kernel_level", None)
            chk["torch_ops_registered"] = hasattr(torch.ops, "deepspeed") and \
                hasattr(torch.ops.deepspeed, "inference_all_reduce_")
            # all ranks have created their segments once the barrier is passed
            self.comm.Barrier()
            segs = {}
            for r in range(self.n):
                p = self.shm_segment(r)
                segs[p] = os.path.getsize(p) if os.path.exists(p) else None
            chk["shm_segments"] = segs
            if chk["accelerator"] != "CPU_Accelerator":
                chk["reasons"].append(f"accelerator is {chk['accelerator']}, not CPU")
            if chk["LOCAL_SIZE"] != str(self.n):
                chk["reasons"].append(f"LOCAL_SIZE={chk['LOCAL_SIZE']!r} != world size {self.n}: "
                                      "the op never creates its shared memory")
            if not chk["shm_op_loaded"]:
                chk["reasons"].append("shm comm op did not build/load (build_shm_op returned None)")
            if not chk["torch_ops_registered"]:
                chk["reasons"].append("torch.ops.deepspeed.inference_all_reduce_ not registered")
            if (chk["vector_kernel_level"] or 0) < 1:
                chk["reasons"].append(f"vector_kernel_level={chk['vector_kernel_level']} < 1: "
                                      "fp32 falls back to torch.distributed.all_reduce")
            bad = [p for p, s in segs.items() if s is None or s < DS_SHM_MIN_BYTES]
            if bad:
                chk["reasons"].append(f"shm segments missing or short: {bad}")
            self.ds = dscomm
        except Exception:  # noqa: BLE001
            chk["reasons"].append("deepspeed failed:\n" + traceback.format_exc())
        # every rank must agree, or a rank alone in the op would hang
        ok_all = self.comm.allreduce(int(not chk["reasons"]), op=self.MPI.MIN)
        if not ok_all and not chk["reasons"]:
            chk["reasons"].append("another rank failed its DeepSpeed check")
        chk["shm_path"] = bool(ok_all)
        chk["calls"] = []  # per size: shm op calls and torch.distributed.all_reduce calls
        return chk

    def ds_counted(self, t, calls):
        """One inference_all_reduce with both possible targets wrapped in counters."""
        ns = torch.ops.deepspeed
        op = ns.inference_all_reduce_
        tdar = self.dist.all_reduce

        def count_op(x):
            calls["shm_op"] += 1
            return op(x)

        def count_dist(*args, **kw):
            calls["torch_distributed_all_reduce"] += 1
            return tdar(*args, **kw)
        setattr(ns, "inference_all_reduce_", count_op)
        self.dist.all_reduce = count_dist
        try:
            self.ds.inference_all_reduce(t)
        finally:
            setattr(ns, "inference_all_reduce_", op)
            self.dist.all_reduce = tdar

    def cleanup(self):
        # shm.cpp never unlinks its segments (66 MiB per rank in /dev/shm); remove ours.
        if self.ds is not None:
            try:
                os.unlink(self.shm_segment(self.rank))
            except OSError:
                pass

    # -- one size ------------------------------------------------------------------------------
    def case(self, system, count):
        """(run(), check() -> max abs error) for `count` float32 elements."""
        dist, n, rank = self.dist, self.n, self.rank
        f32 = torch.float32

        def pattern():
            return torch.arange(count, dtype=f32).remainder_(13).add_(rank)
        expected = torch.arange(count, dtype=f32).remainder_(13).mul_(n).add_(n * (n - 1) / 2)
        buf = torch.zeros(count, dtype=f32)  # zeros: repeated in-place sums stay finite

        if system in ("gloo", "xccl", "xccl_reg", "xccl_solo", "torch_floor"):
            g = {"gloo": self.gloo, "xccl_solo": self.solo, "torch_floor": self.fake}.get(system)
            if system in ("xccl_solo", "torch_floor"):
                expected = pattern()  # a group of one (the fake group changes nothing either)
            if system == "xccl_reg":
                with self.torch_xccl.peer_memory(min_bytes=1):
                    buf = torch.zeros(count, dtype=f32)
                    x_reg = pattern()

            def run():
                dist.all_reduce(buf, group=g)

            def check():
                x = x_reg if system == "xccl_reg" else pattern()
                dist.all_reduce(x, group=g)
                return (x - expected).abs().max().item()
        elif system == "xccl_direct":
            direct = self.torch_xccl.direct
            with self.torch_xccl.peer_memory(min_bytes=1):
                buf = torch.zeros(count, dtype=f32)
                x_reg = pattern()

            def run():
                direct.all_reduce(buf)

            def check():
                direct.all_reduce(x_reg)
                return (x_reg - expected).abs().max().item()
        elif system == "ds_shm":
            ds = self.ds

            def run():
                ds.inference_all_reduce(buf)

            def check():
                x = pattern()
                calls = {"bytes": count * 4, "shm_op": 0, "torch_distributed_all_reduce": 0}
                self.ds_counted(x, calls)
                err = (x - expected).abs().max().item()
                self.ds_check["calls"].append(calls)
                if calls["shm_op"] != 1 or calls["torch_distributed_all_reduce"] != 0:
                    self.ds_check["shm_path"] = False
                    self.ds_check["reasons"].append(f"{count * 4} B: {calls}")
                    err = math.inf  # not the system we mean to time
                return err
        elif system == "mpi":
            MPI, comm = self.MPI, self.comm
            nbuf = buf.numpy()

            def run():
                comm.Allreduce(MPI.IN_PLACE, nbuf, op=MPI.SUM)

            def check():
                x = pattern().numpy()
                comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
                return float(abs(torch.from_numpy(x) - expected).max().item())
        else:
            raise ValueError(system)
        return run, check


def iters_for(nbytes, a):
    return max(a.min_iters, min(a.iters, math.ceil(a.round_bytes / max(nbytes, 1))))


def rank_main(a):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    if a.world_size_given and a.world_size != n:
        raise SystemExit(f"--world-size {a.world_size} but mpirun started {n} ranks")
    torch.set_num_threads(1)

    load_start = os.getloadavg()  # the machine's other work, recorded with the results
    phases = {}  # seconds per set-up phase, as rank 0 saw them
    t = time.perf_counter()
    # memcpy first, by rank 0 alone; the others wait without spinning
    mem = None
    if rank == 0:
        mem = memcpy_at_sizes(a.sizes, a.memcpy_reps)
        comm.Ibarrier().Wait()
    else:
        req = comm.Ibarrier()
        while not req.Test():
            time.sleep(0.01)

    phases["memcpy"] = time.perf_counter() - t
    if rank == 0 and a.progress:
        print(f"memcpy measured in {phases['memcpy']:.1f} s; starting the process groups and "
              "DeepSpeed (its first run JIT-builds the shm op: minutes)", flush=True)
    t = time.perf_counter()
    peers = Peers(a, comm, MPI)
    phases["init_groups_and_deepspeed"] = time.perf_counter() - t
    if rank == 0 and a.progress:
        print(f"groups and DeepSpeed ready in {phases['init_groups_and_deepspeed']:.1f} s",
              flush=True)
    systems = [s for s in SYSTEMS if s != "ds_shm" or peers.ds_check["shm_path"]]
    if rank == 0 and not peers.ds_check["shm_path"]:
        loud("DeepSpeed's shared-memory allreduce is NOT available; DeepSpeed is NOT timed",
             peers.ds_check["reasons"])

    timed = list(systems)  # ds_shm may leave `systems` if DeepSpeed leaves its shm path
    results = []
    t_start = time.perf_counter()
    for nbytes in a.sizes:
        count = max(1, nbytes // 4)
        cases = {s: peers.case(s, count) for s in systems}
        errs = {}
        for s in systems:  # correctness, once per size and system, before timing
            errs[s] = cases[s][1]()
        if "ds_shm" in systems:  # a rank that saw a fallback drops DeepSpeed on every rank
            ok = comm.allreduce(int(peers.ds_check["shm_path"]), op=MPI.MIN)
            if not ok:
                peers.ds_check["shm_path"] = False
                systems = [s for s in systems if s != "ds_shm"]
                del errs["ds_shm"]
                if rank == 0:
                    loud(f"DeepSpeed left its shm path at {util.fmt_bytes(nbytes)}: DeepSpeed is "
                         "NOT timed from this size on", peers.ds_check["reasons"])
        iters = iters_for(count * 4, a)
        for s in systems:
            for _ in range(max(1, min(a.warmup, iters))):
                cases[s][0]()
        times = {s: [] for s in systems}
        for r in range(a.rounds):
            k = r % len(systems)
            for s in systems[k:] + systems[:k]:
                run = cases[s][0]
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    run()
                times[s].append((time.perf_counter() - t0) / iters)
        # slowest rank per round and worst error, reduced outside the timed region
        tarr = np.array([times[s] for s in systems], dtype=np.float64)
        comm.Allreduce(MPI.IN_PLACE, tarr, op=MPI.MAX)
        earr = np.array([errs[s] for s in systems], dtype=np.float64)
        comm.Allreduce(MPI.IN_PLACE, earr, op=MPI.MAX)
        if rank == 0:
            m = next(x for x in mem if x["bytes"] == nbytes)
            row = {"bytes": count * 4, "count": count, "dtype": "float32", "redop": "sum",
                   "iters": iters, "rounds": a.rounds, "memcpy_GBps": m["best_GBps"],
                   "memcpy_us": m["time_us"], "systems": {}}
            for i, s in enumerate(systems):
                rounds_s = tarr[i].tolist()
                med = median(rounds_s)
                algbw = count * 4 / med / 1e9
                busbw = algbw * BUS_FACTOR["allreduce"](n)
                row["systems"][s] = {
                    "time_us": med * 1e6, "time_us_min": min(rounds_s) * 1e6,
                    "rounds_us": [x * 1e6 for x in rounds_s], "algbw_GBps": algbw,
                    "busbw_GBps": busbw, "busbw_over_memcpy": busbw / m["best_GBps"],
                    "max_abs_err": float(earr[i]), "correct": float(earr[i]) == 0.0}
            ok_peers = [s for s in PEERS if s in row["systems"] and row["systems"][s]["correct"]]
            if ok_peers:
                best = min(ok_peers, key=lambda s: row["systems"][s]["time_us"])
                row["best_peer"] = best
                for x in ("xccl", "xccl_reg", "xccl_direct"):
                    if x in row["systems"]:
                        row[f"{x}_time_over_best_peer"] = (row["systems"][x]["time_us"]
                                                           / row["systems"][best]["time_us"])
            if "xccl_solo" in row["systems"]:
                row["xccl_over_floor_us"] = (row["systems"]["xccl"]["time_us"]
                                             - row["systems"]["xccl_solo"]["time_us"])
            if "torch_floor" in row["systems"]:
                row["xccl_over_torch_floor_us"] = (row["systems"]["xccl"]["time_us"]
                                                   - row["systems"]["torch_floor"]["time_us"])
            results.append(row)
            if a.progress:
                print("  " + util.fmt_bytes(count * 4).rjust(6) + "  " + "  ".join(
                    f"{s} {row['systems'][s]['time_us']:.1f} us" for s in systems), flush=True)
    elapsed = time.perf_counter() - t_start

    # DeepSpeed evidence from every rank
    ds_all = comm.gather(peers.ds_check, root=0)
    comm.Barrier()
    peers.cleanup()
    if rank == 0:
        import mpi4py
        meta = metadata({
            "world_size": n, "sizes": a.sizes, "config": {k: v for k, v in vars(a).items()
                                                         if k != "sizes"},
            "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
            "api": API, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "torch_num_threads": torch.get_num_threads(),
            "mpi4py": mpi4py.__version__, "mpi_library": MPI.Get_library_version().strip(),
            "deepspeed": peers.ds_check.get("deepspeed"),
            "xccl_describe": peers.torch_xccl.describe(),
            "method": "per size: exact correctness check per system, warm-up, then rounds; "
                      "each round every system runs iters blocking ops after an MPI barrier, "
                      "system order rotated by one each round; round time = slowest rank's "
                      "per-op mean; reported = median round. memcpy = best single-thread "
                      "copy of the same bytes (torch copy_ / numpy.copyto). nccl-tests "
                      "algbw/busbw, GB/s = 1e9 B/s.",
        })
        out = {"kind": "peers", "meta": meta, "world_size": n,
               "oversubscribed": n > (meta["cpu_affinity"] or meta["cpu_count"]),
               "systems": timed, "elapsed_s": elapsed, "setup_s": phases, "memcpy": mem,
               "deepspeed_shm_check": {"shm_path": all(c["shm_path"] for c in ds_all),
                                       "per_rank": ds_all},
               "results": results}
        print_report(out)
        path = util.result_path(a.json, a.name)
        util.write_json(path, out)
        print(f"\nwrote {path}")
        if not a.no_plot:
            png = a.plot or os.path.join(util.BENCH, f"peers_{n}ranks.png")
            plot(out, png)
            print(f"wrote {png}")
        wrong = any(not v["correct"] for r in results for v in r["systems"].values())
        rc = 1 if wrong else (2 if not out["deepspeed_shm_check"]["shm_path"] else 0)
    else:
        rc = 0
    rc = comm.bcast(rc, root=0)
    peers.dist.destroy_process_group()
    return rc


# ----------------------------------------------------------------------------------------------
# output

def loud(title, reasons):
    bar = "!" * 100
    print(f"\n{bar}\n!!! {title}", flush=True)
    for r in reasons:
        for line in str(r).splitlines():
            print(f"!!!   {line}")
    print(bar + "\n", flush=True)


def print_report(out):
    n, meta = out["world_size"], out["meta"]
    rows, systems = out["results"], out["systems"]
    over = (f"  -- OVERSUBSCRIBED: {n} ranks on {meta['cpu_affinity']} CPUs"
            if out["oversubscribed"] else "")
    print(f"\n=== allreduce, float32, sum, {n} ranks{over}; torch {meta['torch']}, libxccl "
          f"{meta['libxccl']}, DeepSpeed {meta['deepspeed']}, mpi4py {meta['mpi4py']} "
          f"({meta['mpi_library'].splitlines()[0][:40]}), {meta['cpu_count']} CPUs "
          f"({meta['cpu_model']}), {meta['date']} ===")
    if "loadavg_start" in meta:
        print("load average (1/5/15 min) at start %s, at end %s (this run's own ranks count "
              "in the end value)" % tuple("/".join(f"{x:.2f}" for x in meta[k])
                                         for k in ("loadavg_start", "loadavg_end")))
    rounds = rows[0]["rounds"] if rows else 0
    print(f"time = median over {rounds} rounds of the slowest rank's mean per op; "
          f"busbw = algbw * {BUS_FACTOR['allreduce'](n):.3g}; GB/s = 1e9 B/s; "
          f"memcpy = best 1-thread copy of the same bytes\n")
    for s in systems:
        print(f"{s}: {API[s]}")
        print(f"  {'size':>8} {'count':>10} {'iters':>5} {'time(us)':>10} {'algbw':>8} "
              f"{'busbw':>8} {'memcpy':>8} {'bus/mem':>7}  ok")
        for r in rows:
            if s not in r["systems"]:
                print(f"  {util.fmt_bytes(r['bytes']):>8} {r['count']:>10}  not measured")
                continue
            v = r["systems"][s]
            ok = "ok" if v["correct"] else f"WRONG (max err {v['max_abs_err']:.3g})"
            print(f"  {util.fmt_bytes(r['bytes']):>8} {r['count']:>10} {r['iters']:>5} "
                  f"{v['time_us']:10.1f} {v['algbw_GBps']:8.3f} {v['busbw_GBps']:8.3f} "
                  f"{r['memcpy_GBps']:8.2f} {v['busbw_over_memcpy']:7.3f}  {ok}")
        print()
    print("summary: time per op (us); xccl/best = xccl time / fastest correct peer "
          "(< 1: xccl faster); reg/best and dir/best the same for xccl_reg and xccl_direct; -floor = xccl - xccl_solo (us); "
          "-torch = xccl - torch_floor (us)")
    head = f"  {'size':>8} {'memcpy us':>9}" + "".join(f" {s:>10}" for s in systems)
    print(head + f" {'best peer':>10} {'xccl/best':>9} {'reg/best':>9} {'dir/best':>9} "
          f"{'-floor':>7} {'-torch':>7}")
    for r in rows:
        line = f"  {util.fmt_bytes(r['bytes']):>8} {r['memcpy_us']:9.2f}"
        for s in systems:
            v = r["systems"].get(s)
            line += (f" {'-':>10}" if v is None else f" {v['time_us']:10.1f}" if v["correct"]
                     else f" {'WRONG':>10}")
        line += (f" {r['best_peer']:>10} {r['xccl_time_over_best_peer']:9.3f}"
                 if "best_peer" in r else f" {'-':>10} {'-':>9}")
        for x in ("xccl_reg", "xccl_direct"):
            line += (f" {r[x + '_time_over_best_peer']:9.3f}"
                     if x + "_time_over_best_peer" in r else f" {'-':>9}")
        line += (f" {r['xccl_over_floor_us']:7.2f}" if "xccl_over_floor_us" in r else f" {'-':>7}")
        line += (f" {r['xccl_over_torch_floor_us']:7.2f}" if "xccl_over_torch_floor_us" in r
                 else f" {'-':>7}")
        print(line)
    chk = out["deepspeed_shm_check"]
    print()
    if chk["shm_path"]:
        c0 = chk["per_rank"][0]
        calls = sum(c["shm_op"] for pr in chk["per_rank"] for c in pr["calls"])
        fall = sum(c["torch_distributed_all_reduce"] for pr in chk["per_rank"] for c in pr["calls"])
        print(f"DeepSpeed SHM path: TAKEN on every rank. {c0['cdb']} with shm op "
              f"{os.path.basename(c0['shm_op_module'] or '?')} loaded and initialised "
              f"(LOCAL_SIZE={c0['LOCAL_SIZE']} = world size, vector_kernel_level="
              f"{c0['vector_kernel_level']}); shm segments "
              f"{sorted(os.path.basename(p) for p in c0['shm_segments'])} of "
              f"{next(iter(c0['shm_segments'].values()))} B; checks: shm op called {calls}x, "
              f"torch.distributed.all_reduce called {fall}x.")
    else:
        loud("DeepSpeed SHM path NOT TAKEN: no DeepSpeed numbers above",
             [f"rank {r}: {x}" for r, pr in enumerate(chk["per_rank"]) for x in pr["reasons"]])


def size_label(v, _pos=None):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if v >= m:
            return f"{v / m:g}{unit}"
    return f"{v:g}"


def plot(out, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter
    style = {"xccl": ("tab:blue", "o"), "gloo": ("tab:orange", "s"),
             "xccl_reg": ("tab:purple", "v"), "xccl_direct": ("tab:cyan", "<"), "xccl_solo": ("tab:gray", "."),
             "torch_floor": ("black", "x"),
             "ds_shm": ("tab:green", "^"), "mpi": ("tab:red", "D")}
    label = {"xccl": "xccl (torch_xccl)", "gloo": "gloo", "ds_shm": "DeepSpeed CPU shm",
             "mpi": "Open MPI MPI_Allreduce", "xccl_reg": "xccl, torch_xccl.peer_memory() tensor",
             "xccl_direct": "xccl, torch_xccl.direct.all_reduce (no Work)",
             "xccl_solo": "xccl on a group of one (per-call floor)",
             "torch_floor": "torch's fake backend on a group of one (torch's floor)"}
    rows, meta, n = out["results"], out["meta"], out["world_size"]
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    xs = [r["bytes"] for r in rows]
    for s in out["systems"]:
        color, marker = style[s]
        pts = [(r["bytes"], r["systems"][s]["time_us"], r["systems"][s]["correct"])
               for r in rows if s in r["systems"]]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color=color, marker=marker, ms=4,
                label=label[s])
        bad = [(x, y) for x, y, ok in pts if not ok]
        if bad:
            ax.plot(*zip(*bad), "x", color="black", ms=10, mew=2)
    ax.plot(xs, [r["memcpy_us"] for r in rows], ":", color="gray", marker=".",
            label="1-thread memcpy of the same bytes (one Python call)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    ax.set_xticks(xs)
    ax.set_xlabel("allreduce size (bytes, float32)")
    ax.set_ylabel("time per op (us), median round, slowest rank")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=9)
    over = " (oversubscribed)" if out.get("oversubscribed") else ""
    ax.set_title(f"allreduce, {n} ranks{over}, same processes: libxccl {meta.get('libxccl')}, "
                 f"torch {meta.get('torch')},\nDeepSpeed {meta.get('deepspeed')}, "
                 f"{meta.get('mpi_library', '').split(',')[0]}; {meta.get('cpu_count')} CPUs, "
                 f"{meta.get('date', '')[:10]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-n", "--world-size", type=int, default=None,
                   help="ranks (default 2; under mpirun: mpirun's -np)")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated byte sizes")
    p.add_argument("--max-bytes", default=None, help="drop sizes above this")
    p.add_argument("--rounds", type=int, default=7, help="rounds per system (order rotated)")
    p.add_argument("--iters", type=int, default=1000, help="max ops per round (small sizes)")
    p.add_argument("--min-iters", type=int, default=2, help="min ops per round (large sizes)")
    p.add_argument("--round-bytes", default="128M",
                   help="ops per round = clamp(round-bytes / size, min-iters, iters)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up ops per system and size")
    p.add_argument("--memcpy-reps", type=int, default=7, help="memcpy samples (best taken)")
    p.add_argument("--timeout", type=float, default=1800, help="hard timeout of the mpirun (s)")
    p.add_argument("--pg-timeout", type=float, default=300, help="process-group timeout (s)")
    p.add_argument("--name", default=None, help="result name (default peers_<n>ranks_<date>)")
    p.add_argument("--json", default=None, help="default bench/results/<name>.json")
    p.add_argument("--plot", default=None, help="PNG path (default bench/peers_<n>ranks.png)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--plot-only", metavar="JSON", default=None,
                   help="redraw the plot (and table) from a JSON of an earlier run; no run")
    p.add_argument("--quiet", dest="progress", action="store_false",
                   help="no per-size progress lines")
    a = p.parse_args()

    if a.plot_only:
        with open(a.plot_only) as f:
            out = json.load(f)
        print_report(out)
        png = a.plot or os.path.join(util.BENCH, f"peers_{out['world_size']}ranks.png")
        plot(out, png)
        print(f"wrote {png}")
        return 0

    a.world_size_given = a.world_size is not None
    if a.world_size is None:
        a.world_size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 2))
    sizes = [util.parse_bytes(s) for s in a.sizes.split(",") if s.strip()]
    if a.max_bytes:
        sizes = [s for s in sizes if s <= util.parse_bytes(a.max_bytes)]
    a.sizes = [max(4, s // 4 * 4) for s in sizes]
    a.round_bytes = util.parse_bytes(a.round_bytes)
    a.name = a.name or f"peers_{a.world_size}ranks_" + \
        datetime.datetime.now().strftime("%Y%m%d-%H%M%S")

    if not UNDER_MPI:
        return relaunch_under_mpirun(a)
    try:
        return rank_main(a)
    except BaseException:  # noqa: BLE001  one failing rank must not leave the others hanging
        if isinstance(sys.exc_info()[1], SystemExit) and not sys.exc_info()[1].code:
            raise
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        from mpi4py import MPI
        MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    sys.exit(main())
