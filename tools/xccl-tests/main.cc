// xccl-tests: conformance and performance tests for libxccl (our nccl-tests).
//
// Launch modes (rank = process index * nthreads + thread index):
//   threads    xccl-tests all_reduce -t 4          4 ranks as threads of this process
//   processes  xccl-tests all_reduce -p 4 [-t 2]   this process forks 4 rank processes and
//                                                  supervises them (kills all if one fails)
//   launcher   torchrun / mpirun / srun start N copies; each takes its process rank and
//              world size from RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE or
//              SLURM_PROCID/SLURM_STEP_NUM_TASKS, and finds the out-of-band server of process
//              0 at MASTER_ADDR:MASTER_PORT (or through the file XCCL_TESTS_ID_FILE).
// In every mode, rank 0 creates the xcclUniqueId and sends it to the others through the
// out-of-band channel (oob.h); each rank then calls xcclCommInitRankConfig.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device_api.h"
#include "oob.h"
#include "options.h"
#include "runner.h"

namespace {

using xt::Options;
using xt::RankSetup;

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "xccl-tests: %s\n", msg.c_str());
  std::exit(code);
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

struct Launcher {
  const char* source = nullptr;  // null = not started by a launcher
  int rank = 0;
  int world = 1;
  int localRank = 0;
};

Launcher detectLauncher() {
  Launcher l;
  if (env("XCCL_TESTS_NO_LAUNCHER")) return l;
  static const struct {
    const char *rank, *size, *local, *name;
  } kVars[] = {
      {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun (RANK/WORLD_SIZE)"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI (MPICH/Intel MPI)"},
      {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "Slurm (srun)"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"},
  };
  for (const auto& v : kVars) {
    if (env(v.rank) && env(v.size)) {
      l.source = v.name;
      l.rank = std::atoi(env(v.rank));
      l.world = std::atoi(env(v.size));
      l.localRank = env(v.local) ? std::atoi(env(v.local)) : 0;
      if (l.world < 1 || l.rank < 0 || l.rank >= l.world) {
        die(xt::kExitUsage,
            std::string("bad rank/size from ") + v.name + ": " + env(v.rank) + "/" + env(v.size));
      }
      return l;
    }
  }
  return l;
}

// Rejects explicitly requested combinations the library does not define; "all" lists skip them.
void validate(const Options& o, int nranks) {
  if (o.conformance) return;
  for (xt::Coll c : o.colls) {
    const xt::CollInfo& ci = xt::collInfo(c);
    std::string whyNot = xt::worldUnsupportedReason(c, nranks);
    if (!whyNot.empty()) die(xt::kExitUsage, std::string(ci.name) + ": " + whyNot);
    if (ci.hasRoot && o.root >= nranks) {
      die(xt::kExitUsage,
          "-r " + std::to_string(o.root) + " is not a rank (" + std::to_string(nranks) + " ranks)");
    }
    if (!ci.hasOp || o.opsAll || o.typesAll) continue;
    for (xcclDataType_t t : o.types) {
      for (xcclRedOp_t op : o.ops) {
        std::string why = xt::unsupportedReason(c, t, op);
        if (!why.empty()) die(xt::kExitUsage, std::string(ci.name) + ": " + why);
      }
    }
  }
}

// Runs ranks [first, first + n) as threads. If a rank fails, the others get 15 s to notice
// (the out-of-band server disconnects them) before the process gives up on them.
int runThreads(const Options& o, const RankSetup& base, int first, int n, int deviceBase,
               const std::vector<xcclComm_t>* comms = nullptr) {
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, worst = 0;
  bool failed = false;
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    RankSetup s = base;
    s.rank = first + t;
    s.device = deviceBase + t;
    if (comms != nullptr) s.comm = (*comms)[t];
    threads.emplace_back([&, s] {
      int code = xt::runRank(o, s);
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      worst = code > worst ? code : worst;
      failed = failed || code == xt::kExitFailure;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == n || failed; });
    if (!cv.wait_for(lock, std::chrono::seconds(15), [&] { return done == n; })) {
      std::fprintf(stderr, "xccl-tests: %d rank thread(s) still stuck after a failure; exiting\n",
                   n - done);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(xt::kExitFailure);
    }
  }
  for (auto& th : threads) th.join();
  return worst;
}

// Forks nprocs children (each running -t threads) and waits; kills the rest if one fails.
int runProcesses(const Options& o, RankSetup base, int listenFd, xt::OobServer& server) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int p = 0; p < o.nprocs; ++p) {
    pid_t pid = fork();
    if (pid < 0) die(xt::kExitFailure, "fork failed");
    if (pid == 0) {
      close(listenFd);
      base.group = p;
      int code = runThreads(o, base, p * o.nthreads, o.nthreads, p * o.nthreads);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  server.start();
  int worst = 0;
  size_t left = pids.size();
  auto killDeadline = std::chrono::steady_clock::time_point::max();
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --left;
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : xt::kExitFailure;
      const bool victim = o.killRank >= 0 && pid == pids[o.killRank];
      if (victim && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        std::fprintf(stderr, "xccl-tests: rank %d (process %d) killed itself as --kill asked\n",
                     o.killRank, static_cast<int>(pid));
        continue;
      }
      if (WIFSIGNALED(status)) {
        std::fprintf(stderr, "xccl-tests: rank process %d killed by signal %d\n",
                     static_cast<int>(pid), WTERMSIG(status));
      }
      worst = code > worst ? code : worst;
      if (code == xt::kExitFailure &&
          killDeadline == std::chrono::steady_clock::time_point::max()) {
        killDeadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > killDeadline) {
      std::fprintf(
          stderr, "xccl-tests: killing %zu rank process(es) still running after a failure\n", left);
      for (pid_t p : pids) kill(p, SIGKILL);
      killDeadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return worst;
}

std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// Launcher mode: where is process 0's out-of-band server?
void launcherAddress(const Launcher& l, RankSetup* s, int* listenPort, bool* useFile) {
  const char* file = env("XCCL_TESTS_ID_FILE");
  *useFile = file != nullptr;
  if (*useFile) {
    *listenPort = env("XCCL_TESTS_PORT") ? std::atoi(env("XCCL_TESTS_PORT")) : 0;
    return;  // process 0 writes "host port" into the file; the others read it
  }
  if (!env("MASTER_ADDR")) {
    die(xt::kExitUsage, std::string("started by ") + l.source +
                            " but MASTER_ADDR is not set: export MASTER_ADDR (and MASTER_PORT) to "
                            "the host of rank 0, or XCCL_TESTS_ID_FILE to a path on a shared "
                            "filesystem");
  }
  s->oobHost = env("MASTER_ADDR");
  int port = env("MASTER_PORT") ? std::atoi(env("MASTER_PORT")) : 29500;
  // torchrun's agent already serves its own store on MASTER_PORT: use the next port.
  if (env("TORCHELASTIC_RUN_ID")) port += 1;
  if (env("XCCL_TESTS_PORT")) port = std::atoi(env("XCCL_TESTS_PORT"));
  *listenPort = port;
  s->oobPort = port;
}

void readIdFile(const std::string& path, RankSetup* s, int timeoutSec) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path);
    if (in >> s->oobHost >> s->oobPort) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  die(xt::kExitFailure,
      "no rendezvous address in " + path + " after " + std::to_string(timeoutSec) + " s");
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Options o = xt::parseOptions(argc, argv);
  if (o.reproducible) {
    // Read by libxccl when each communicator is made (forked ranks inherit it).
    setenv("XCCL_REPRODUCIBLE", "1", 1);
    xt::setReproducible(true);
  }
  Launcher l = detectLauncher();
  bool multiHost = l.source && l.world > 1;
  if (multiHost && o.nprocs > 1) {
    die(xt::kExitUsage, std::string("-p cannot be combined with a launcher (") + l.source +
                            " started " + std::to_string(l.world) + " processes already)");
  }
  if (o.ngpus > 1 && (multiHost || o.nprocs > 1 || o.nthreads > 1)) {
    die(xt::kExitUsage,
        "-g makes every rank of the run in this process: use it alone, "
        "without -t, -p or a launcher");
  }
  int procs = multiHost ? l.world : o.nprocs;
  o.nprocs = procs;  // the header reports processes, however they were started
  if (multiHost) o.launcher = l.source;
  int nranks = procs * o.nthreads * o.ngpus;
  validate(o, nranks);
  if (o.killRank >= 0) {
    // A thread cannot be killed alone, and a launcher has its own policy on a dead process
    // (torchrun restarts the group, mpirun aborts the job): forked processes only.
    if (multiHost || o.nprocs < 2 || o.nthreads != 1 || o.ngpus != 1) {
      die(xt::kExitUsage,
          "--kill needs -p N (N >= 2) with one rank per process (no -t, -g or "
          "launcher)");
    }
    if (o.killRank >= nranks) {
      die(xt::kExitUsage, "--kill " + std::to_string(o.killRank) + " is not a rank (" +
                              std::to_string(nranks) + " ranks)");
    }
  }

  RankSetup base;
  base.nranks = nranks;
  base.oobTimeoutSec = o.timeoutSec;
  if (!multiHost) {
    // One host: the out-of-band server lives in this (parent) process on loopback.
    std::string err;
    int port = 0;
    int fd = xt::oobListen("127.0.0.1", 0, &port, &err);
    if (fd < 0) die(xt::kExitFailure, "out-of-band listener: " + err);
    base.oobHost = "127.0.0.1";
    base.oobPort = port;
    xt::OobServer server(fd, nranks, o.timeoutSec, /*tolerateLoss=*/o.killRank >= 0);
    int code;
    if (o.nprocs > 1) {
      o.launcher = "fork (-p)";
      code = runProcesses(o, base, fd, server);
    } else if (o.ngpus > 1) {
      // One xcclCommInitAll makes all the ranks (as ncclCommInitAll); a thread drives each.
      xcclConfig_t cfg;
      std::memset(&cfg, 0, sizeof cfg);
      cfg.timeout_ms = static_cast<int64_t>(o.timeoutSec) * 1000;
      cfg.name = "xccl-tests";
      if (o.device == "xdev") cfg.deviceType = xcclDeviceXdev;
      if (o.device == "cuda") cfg.deviceType = xcclDeviceCuda;
      // More ranks than devices share them, rank i on device i modulo the count.
      std::vector<int> devlist(o.ngpus, 0);
      if (o.device != "host") {
        int count = 1;
        try {
          count = xt::DeviceApi::make(o.device)->count();
        } catch (const std::exception& e) {
          die(xt::kExitFailure, e.what());
        }
        for (int i = 0; i < o.ngpus; ++i) devlist[i] = i % count;
      }
      std::vector<xcclComm_t> comms(o.ngpus, nullptr);
      xcclResult_t r = xcclCommInitAllConfig(comms.data(), o.ngpus,
                                             o.device == "host" ? nullptr : devlist.data(), &cfg);
      if (r != xcclSuccess) {
        die(xt::kExitFailure, std::string("xcclCommInitAllConfig failed: ") +
                                  xcclGetErrorString(r) + ": " + xcclGetLastError(nullptr));
      }
      o.launcher = "xcclCommInitAll (-g)";
      server.start();
      code = runThreads(o, base, 0, o.ngpus, 0, &comms);
    } else {
      server.start();
      code = runThreads(o, base, 0, o.nthreads, 0);
    }
    server.join();
    return code;
  }

  // Launcher mode: process 0 serves the out-of-band channel for every rank on every host.
  int listenPort = 0;
  bool useFile = false;
  launcherAddress(l, &base, &listenPort, &useFile);
  base.group = l.rank;
  std::unique_ptr<xt::OobServer> server;
  std::string idFile = useFile ? env("XCCL_TESTS_ID_FILE") : "";
  if (l.rank == 0) {
    std::string err;
    int port = 0;
    int fd = xt::oobListen("", listenPort, &port, &err);
    if (fd < 0) die(xt::kExitFailure, "out-of-band listener: " + err);
    server = std::make_unique<xt::OobServer>(fd, nranks, o.timeoutSec);
    server->start();
    if (useFile) {
      std::string host = env("XCCL_TESTS_ADDR") ? env("XCCL_TESTS_ADDR") : hostName();
      std::string tmp = idFile + ".tmp." + std::to_string(getpid());
      std::ofstream(tmp) << host << " " << port << "\n";
      if (std::rename(tmp.c_str(), idFile.c_str()) != 0)
        die(xt::kExitFailure, "cannot write " + idFile);
      base.oobHost = "127.0.0.1";
      base.oobPort = port;
    } else {
      base.oobHost = "127.0.0.1";  // our own server; no need to resolve MASTER_ADDR here
    }
  } else if (useFile) {
    readIdFile(idFile, &base, o.timeoutSec);
  }
  int code = runThreads(o, base, l.rank * o.nthreads, o.nthreads, l.localRank * o.nthreads);
  if (server) {
    server->join();
    if (useFile) std::remove(idFile.c_str());
  }
  return code;
}
