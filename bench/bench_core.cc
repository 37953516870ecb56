// bench_core: the shared-memory heart of libxccl against the machine's physical limit.
//
// Forks N ranks (processes, default 2) on this host; they rendezvous through a unique id
// and run float32 allreduce at 8 B (latency) and 1, 16, 64 MiB (bus bandwidth, as
// nccl-tests defines it: busbw = algbw * 2(n-1)/n). In the same run, before the ranks
// start, it measures single-thread memcpy bandwidth on buffers of the same sizes, the
// limit a copy-based transport cannot beat. Prints a table and, with --json FILE, JSON.
//
//   bench_core [--ranks N] [--iters K] [--sizes 8,1048576,...] [--caller] [--in-place]
//              [--xdev | --mem-alloc] [--put-signal [--xdev]] [--json out.json]
//
// Each allreduce is waited for before the next (as a blocking collective): by default it
// is enqueued for the progress thread and waited with xcclEventRecord + xcclEventWait;
// --caller runs it on the calling thread instead (stream XCCL_STREAM_CALLER), the way the
// torch backend runs blocking collectives. --xdev puts the buffers in xdev device memory
// (rank i on xdev:i, an xdev communicator; the default stream), where messages of
// XCCL_PEER_READ_MIN bytes or more are read in place by the peer (single copy). --mem-alloc
// keeps the host device but takes the buffers from xcclMemAlloc (memory the peers of this
// host can map), so they are read in place too, and registers them (xcclCommRegister).
// --in-place reduces each rank's buffer into itself (as torch's all_reduce does): the first
// call's sums are checked, then the buffer is zeroed so that the timed sums stay finite.
// --put-signal measures one-sided puts instead (2 ranks, windows from xcclMemAlloc): a
// ping-pong where each side puts the message into the other's window with a signal and
// waits for the answer's signal; time = half a round trip, beside the same ping-pong made
// of xcclSend/xcclRecv on the caller. With --xdev the windows are xdev memory and every
// put, wait, send and receive is ordered on the default stream (the waiting side then
// synchronizes it).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "xccl.h"
#include "xdev_runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Single-thread memcpy bandwidth (bytes copied / s), buffers pre-faulted: the median of
// `reps` copies, the same statistic as the allreduce times, so the ratio compares like
// with like.
double memcpyBandwidth(size_t bytes, int reps) {
  std::vector<char> src(bytes, 1), dst(bytes, 2);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    t.push_back(seconds(t0, Clock::now()));
  }
  if (dst[bytes / 2] != 1) std::abort();
  std::sort(t.begin(), t.end());
  return static_cast<double>(bytes) / t[t.size() / 2];
}

struct Result {
  size_t bytes;
  double usPerOp;
};

void check(xcclResult_t r, const char* what) {
  if (r != xcclSuccess) {
    fprintf(stderr, "%s: %s: %s\n", what, xcclGetErrorString(r), xcclGetLastError(nullptr));
    exit(1);
  }
}

// Runs inside one rank: returns the time per allreduce for each size (median of rounds).
std::vector<Result> runRank(int rank, int nranks, xcclUniqueId id, const std::vector<size_t>& sizes,
                            int iters, bool onCaller, bool onXdev, bool memAlloc, bool inPlace) {
  xcclComm_t comm;
  xcclConfig_t cfg{};
  cfg.device = onXdev ? rank : -1;
  cfg.deviceType = onXdev ? xcclDeviceXdev : xcclDeviceHost;
  if (onXdev && xdevSetDevice(rank) != xdevSuccess) {
    fprintf(stderr, "xdevSetDevice(%d): %s\n", rank, xdevGetLastErrorMessage());
    exit(1);
  }
  check(xcclCommInitRankConfig(&comm, nranks, id, rank, &cfg), "init");
  std::vector<Result> out;
  for (size_t bytes : sizes) {
    size_t count = bytes / sizeof(float);
    std::vector<float> hostSend(count, 1.0f + rank), hostRecv(count);
    float* sendp = hostSend.data();
    float* recvp = hostRecv.data();
    if (onXdev && count > 0) {
      if (xdevMalloc(reinterpret_cast<void**>(&sendp), bytes) != xdevSuccess ||
          xdevMalloc(reinterpret_cast<void**>(&recvp), bytes) != xdevSuccess) {
        fprintf(stderr, "xdevMalloc: %s\n", xdevGetLastErrorMessage());
        exit(1);
      }
      xdevMemcpy(sendp, hostSend.data(), bytes, xdevMemcpyHostToDevice);
    }
    void *sendReg = nullptr, *recvReg = nullptr;
    if (memAlloc && count > 0) {
      check(xcclMemAlloc(reinterpret_cast<void**>(&sendp), bytes), "xcclMemAlloc");
      check(xcclMemAlloc(reinterpret_cast<void**>(&recvp), bytes), "xcclMemAlloc");
      std::copy(hostSend.begin(), hostSend.end(), sendp);
      check(xcclCommRegister(comm, sendp, bytes, &sendReg), "xcclCommRegister");
      check(xcclCommRegister(comm, recvp, bytes, &recvReg), "xcclCommRegister");
    }
    float* recvOwned = recvp;  // what to free
    if (inPlace) recvp = sendp;
    float want = 0;
    for (int r = 0; r < nranks; ++r) want += 1.0f + r;
    if (inPlace && count > 0) {  // one checked call, then zeros (in place, sums would grow)
      check(xcclAllReduce(sendp, sendp, count, xcclFloat32, xcclSum, comm, nullptr), "allreduce");
      xcclEvent_t done;
      check(xcclEventRecord(&done, comm), "record");
      check(xcclEventWait(&done, -1), "wait");
      if (onXdev) xdevDeviceSynchronize();
      std::vector<float> first(count);
      if (onXdev) {
        xdevMemcpy(first.data(), sendp, bytes, xdevMemcpyDeviceToHost);
      } else {
        std::copy(sendp, sendp + count, first.begin());
      }
      if (first[0] != want || first[count - 1] != want) {
        fprintf(stderr, "rank %d: wrong in-place result %f != %f\n", rank, first[0], want);
        exit(2);
      }
      if (onXdev) {
        xdevMemsetAsync(sendp, 0, bytes, nullptr);
        xdevDeviceSynchronize();
      } else {
        std::fill(sendp, sendp + count, 0.0f);
      }
      want = 0;
    }
    int n = bytes <= 4096 ? iters * 50 : std::max(3, static_cast<int>(iters * (1 << 20) / bytes));
    xcclEvent_t ev;
    for (int w = 0; w < std::min(n, 20); ++w) {  // warm-up
      check(xcclAllReduce(sendp, recvp, count, xcclFloat32, xcclSum, comm, nullptr), "allreduce");
    }
    check(xcclBarrier(comm, nullptr), "barrier");
    check(xcclEventRecord(&ev, comm), "record");
    check(xcclEventWait(&ev, -1), "wait");
    std::vector<double> rounds;
    for (int round = 0; round < 5; ++round) {
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) {
        // One op at a time, as a training step issues them: latency includes the handoff.
        if (onCaller) {
          check(xcclAllReduce(sendp, recvp, count, xcclFloat32, xcclSum, comm, XCCL_STREAM_CALLER),
                "allreduce");
          continue;
        }
        check(xcclAllReduce(sendp, recvp, count, xcclFloat32, xcclSum, comm, nullptr), "allreduce");
        check(xcclEventRecord(&ev, comm), "record");
        check(xcclEventWait(&ev, -1), "wait");
      }
      rounds.push_back(seconds(t0, Clock::now()) / n * 1e6);
    }
    std::sort(rounds.begin(), rounds.end());
    if (onXdev && count > 0) {
      xdevDeviceSynchronize();
      xdevMemcpy(hostRecv.data(), recvp, bytes, xdevMemcpyDeviceToHost);
      xdevFree(sendp);
      xdevFree(recvOwned);
    }
    if (memAlloc && count > 0) {
      std::copy(recvp, recvp + count, hostRecv.begin());
      check(xcclCommDeregister(comm, sendReg), "xcclCommDeregister");
      check(xcclCommDeregister(comm, recvReg), "xcclCommDeregister");
      check(xcclMemFree(sendp), "xcclMemFree");
      check(xcclMemFree(recvOwned), "xcclMemFree");
    }
    const std::vector<float>& recv = hostRecv;
    if (count > 0 && (recv[0] != want || recv[count - 1] != want)) {
      fprintf(stderr, "rank %d: wrong result %f != %f\n", rank, recv[0], want);
      exit(2);
    }
    out.push_back({bytes, rounds[rounds.size() / 2]});
  }
  check(xcclCommDestroy(comm), "destroy");
  return out;
}

// --put-signal: half a ping-pong round trip per size, put/signal and send/recv (us).
// With onXdev: an xdev communicator, windows in xdev memory, every put, signal wait, send and
// receive on the default stream, and the waiting side synchronizes the stream after its wait.
std::vector<Result> runPutSignal(int rank, xcclUniqueId id, const std::vector<size_t>& sizes,
                                 int iters, bool onXdev, std::vector<Result>* sendRecv) {
  xcclComm_t comm;
  xcclConfig_t cfg{};
  cfg.device = onXdev ? rank : -1;
  cfg.deviceType = onXdev ? xcclDeviceXdev : xcclDeviceHost;
  if (onXdev && xdevSetDevice(rank) != xdevSuccess) {
    fprintf(stderr, "xdevSetDevice(%d) failed\n", rank);
    exit(1);
  }
  check(xcclCommInitRankConfig(&comm, 2, id, rank, &cfg), "init");
  size_t most = 64;
  for (size_t b : sizes) most = std::max(most, b);
  char *win = nullptr, *src = nullptr;
  auto alloc = [&](char** p) {
    if (onXdev) {
      if (xdevMalloc(reinterpret_cast<void**>(p), most) != xdevSuccess) exit(1);
    } else {
      check(xcclMemAlloc(reinterpret_cast<void**>(p), most), "xcclMemAlloc");
    }
  };
  alloc(&win);
  alloc(&src);
  std::memset(src, rank + 1, most);                             // xdev memory is host memory
  xcclStream_t stream = onXdev ? nullptr : XCCL_STREAM_CALLER;  // for send and receive
  auto sync = [&] {
    if (onXdev && xdevStreamSynchronize(nullptr) != xdevSuccess) {
      fprintf(stderr, "rank %d: stream: %s\n", rank, xdevGetLastErrorMessage());
      exit(2);
    }
  };
  xcclWindow_t w;
  check(xcclCommWindowRegister(comm, win, most, &w, 0), "xcclCommWindowRegister");
  const int peer = 1 - rank;
  std::vector<Result> out;
  for (size_t bytes : sizes) {
    const int n =
        bytes <= 65536 ? iters * 100 : std::max(5, static_cast<int>(iters * (1 << 22) / bytes));
    auto pingPong = [&](bool put) {
      xcclWaitSignalDesc_t d{1, peer, 0, 0};
      for (int i = 0; i < n; ++i) {
        for (int turn = 0; turn < 2; ++turn) {
          if ((turn == 0) == (rank == 0)) {
            if (put) {
              check(xcclPutSignal(src, bytes, xcclUint8, peer, w, 0, 0, 0, 0, comm, nullptr),
                    "put");
            } else {
              check(xcclSend(src, bytes, xcclUint8, peer, comm, stream), "send");
            }
          } else if (put) {
            check(xcclWaitSignal(1, &d, comm, nullptr), "wait");
            sync();
          } else {
            check(xcclRecv(win, bytes, xcclUint8, peer, comm, stream), "recv");
            sync();
          }
        }
      }
    };
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 5; ++round) {
      for (int k = 0; k < 2; ++k) {
        check(xcclBarrier(comm, stream), "barrier");
        sync();
        auto t0 = Clock::now();
        pingPong(k == 0);
        sync();
        best[k] = std::min(best[k], seconds(t0, Clock::now()) / n / 2 * 1e6);
      }
    }
    if (static_cast<unsigned char>(win[bytes - 1]) != static_cast<unsigned char>(peer + 1)) {
      fprintf(stderr, "rank %d: wrong bytes after %zu-byte puts\n", rank, bytes);
      exit(2);
    }
    out.push_back({bytes, best[0]});
    sendRecv->push_back({bytes, best[1]});
  }
  check(xcclCommWindowDeregister(comm, w), "xcclCommWindowDeregister");
  for (char* p : {win, src}) {
    if (onXdev) {
      xdevFree(p);
    } else {
      check(xcclMemFree(p), "xcclMemFree");
    }
  }
  check(xcclCommDestroy(comm), "destroy");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int nranks = 2, iters = 20;
  bool onCaller = false, onXdev = false, memAlloc = false, putSignal = false, inPlace = false;
  const char* json = nullptr;
  std::vector<size_t> sizes = {8, 1 << 20, 16 << 20, 64 << 20};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc)
      nranks = atoi(argv[++i]);
    else if (a == "--iters" && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (a == "--caller")
      onCaller = true;
    else if (a == "--in-place")
      inPlace = true;
    else if (a == "--xdev")
      onXdev = true;
    else if (a == "--mem-alloc")
      memAlloc = true;
    else if (a == "--put-signal")
      putSignal = true;
    else if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (char* tok = strtok(argv[++i], ","); tok; tok = strtok(nullptr, ",")) {
        sizes.push_back(strtoull(tok, nullptr, 0));
      }
    } else {
      fprintf(
          stderr,
          "usage: %s [--ranks N] [--iters K] [--sizes B,B,...] [--caller] [--in-place] [--xdev | "
          "--mem-alloc | "
          "--put-signal] [--json FILE]\n",
          argv[0]);
      return 2;
    }
  }
  std::vector<double> memcpyBw;
  for (size_t b : sizes)
    memcpyBw.push_back(b < 4096 ? 0 : memcpyBandwidth(b, b > (8 << 20) ? 9 : 41));

  xcclUniqueId id;
  check(xcclGetUniqueId(&id), "uniqueid");
  if (putSignal) {
    auto* res =
        static_cast<Result*>(mmap(nullptr, 2 * sizeof(Result) * sizes.size(),
                                  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    std::vector<pid_t> kids;
    for (int r = 0; r < 2; ++r) {
      pid_t p = fork();
      if (p == 0) {
        std::vector<Result> sr;
        auto ps = runPutSignal(r, id, sizes, iters, onXdev, &sr);
        if (r == 0) {
          std::copy(ps.begin(), ps.end(), res);
          std::copy(sr.begin(), sr.end(), res + sizes.size());
        }
        _exit(0);
      }
      kids.push_back(p);
    }
    int bad = 0;
    for (pid_t p : kids) {
      int st = 0;
      waitpid(p, &st, 0);
      bad |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    if (bad) return 1;
    printf("# bench_core --put-signal: 2 ranks, %s, half a ping-pong round trip (us), best of 5\n",
           onXdev ? "xdev windows, ordered on the default stream" : "host windows, on the caller");
    printf("%12s %14s %14s %14s\n", "size(B)", "put+signal", "send/recv", "put GB/s");
    for (size_t i = 0; i < sizes.size(); ++i) {
      printf("%12zu %14.2f %14.2f %14.3f\n", res[i].bytes, res[i].usPerOp,
             res[sizes.size() + i].usPerOp, res[i].bytes / (res[i].usPerOp * 1e-6) / 1e9);
    }
    return 0;
  }
  // Rank 0's results come back through a shared anonymous mapping.
  auto* shared =
      static_cast<Result*>(mmap(nullptr, sizeof(Result) * sizes.size(), PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    pid_t p = fork();
    if (p == 0) {
      auto res = runRank(r, nranks, id, sizes, iters, onCaller, onXdev, memAlloc, inPlace);
      if (r == 0) std::copy(res.begin(), res.end(), shared);
      _exit(0);
    }
    pids.push_back(p);
  }
  int failed = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    failed |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  if (failed) {
    fprintf(stderr, "a rank failed\n");
    return 1;
  }
  const double factor = 2.0 * (nranks - 1) / nranks;
  printf("# bench_core: float32 allreduce, %d ranks (processes, shared memory), %ld cores, %s\n",
         nranks, sysconf(_SC_NPROCESSORS_ONLN),
         onCaller
             ? (memAlloc ? "xcclMemAlloc host memory, on the calling thread (XCCL_STREAM_CALLER)"
                         : "on the calling thread (XCCL_STREAM_CALLER)")
         : onXdev   ? "xdev device memory, enqueued + xcclEventWait"
         : memAlloc ? "xcclMemAlloc host memory, enqueued + xcclEventWait"
                    : "enqueued + xcclEventWait");
  printf("%12s %12s %12s %12s %14s %10s\n", "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
         "memcpy(GB/s)", "bus/memcpy");
  FILE* jf = json ? fopen(json, "w") : nullptr;
  if (jf) {
    fprintf(jf, "{\"ranks\": %d, \"caller\": %s, \"xdev\": %s, \"mem_alloc\": %s, \"results\": [",
            nranks, onCaller ? "true" : "false", onXdev ? "true" : "false",
            memAlloc ? "true" : "false");
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Result& r = shared[i];
    double algbw = r.bytes / (r.usPerOp * 1e-6) / 1e9;
    double busbw = algbw * factor;
    double mc = memcpyBw[i] / 1e9;
    printf("%12zu %12.2f %12.3f %12.3f %14s %10s\n", r.bytes, r.usPerOp, algbw, busbw,
           mc > 0 ? std::to_string(mc).substr(0, 6).c_str() : "-",
           mc > 0 ? std::to_string(busbw / mc).substr(0, 5).c_str() : "-");
    if (jf) {
      fprintf(jf,
              "%s{\"bytes\": %zu, \"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, "
              "\"memcpy_gbps\": %.4f}",
              i ? ", " : "", r.bytes, r.usPerOp, algbw, busbw, mc);
    }
  }
  if (jf) {
    fprintf(jf, "]}\n");
    fclose(jf);
  }
  return 0;
}
