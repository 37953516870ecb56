"""torch_xccl's benchmarks and soak tests (not shipped in the wheel).

What is here (bench/README.md has the commands, BENCHMARKS.md the results):
- throughput and latency against the peers: bench_torch.py (collectives, xccl vs Gloo),
  bench_ddp.py and bench_ddp_sweep.py (DDP training steps), bench_peers.py (Gloo, DeepSpeed,
  MPI), bench_cuda.py, bench_xdev.py, bench_xdev_comm.py, xdev_call_cost.py, bench_fair.py
  (sharing the cores), bench_flight_recorder.py, bench_two_hosts.py and bench_hierarchical.py
  (shaped links between network namespaces), bench_core.cc and bench_cma.cc (the C++ core);
- robustness: fault_suite.py (+ fault_suite_worker.py), soak.py, exit_soak.py, reinit_soak.py;
- plot.py, the plots of bench_torch.py's results; results/ is where the JSON results go;
- util.py, the helpers the scripts share (paths, a free port, the tests' helpers, JSON).

The scripts are run by path (`python3 bench/bench_torch.py ...`); each one's first lines put
the repository root on sys.path, so that they import each other as `bench.<module>`.
"""
