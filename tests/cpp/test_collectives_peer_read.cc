// Single copy between processes (peer reads) under faults: a rank killed while its peers
// read its xdev buffers in place makes every survivor raise (no hang, no wrong answer), and
// in-place ring allreduces through peer reads stay exact over many rounds (each block of a
// rank's buffer is overwritten only after every peer finished reading it).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "xccl.h"
#include "xdev_runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
using xccl_test::ScopedEnv;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Each rank: an xdev communicator on xdev:rank; `fn` returns the rank's exit code.
std::map<int, int> runXdevProcesses(int n, const std::function<int(int, xcclComm_t)>& fn,
                                    int timeoutSec) {
  xcclUniqueId id;
  EXPECT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  return xccl_test::runProcesses(
      n,
      [&](int rank) {
        if (xdevSetDevice(rank) != xdevSuccess) _exit(20);
        xcclConfig_t cfg{};
        cfg.timeout_ms = 60000;
        cfg.device = rank;
        cfg.deviceType = xcclDeviceXdev;
        xcclComm_t comm = nullptr;
        if (xcclCommInitRankConfig(&comm, n, id, rank, &cfg) != xcclSuccess) _exit(21);
        const int rc = fn(rank, comm);
        fflush(stderr);
        _exit(rc);
      },
      timeoutSec, /*expectAllSucceed=*/false);
}

// One in-place allreduce of `count` floats on the default stream, waited for.
xcclResult_t allreduce(xcclComm_t comm, float* buf, size_t count) {
  xcclResult_t r = xcclAllReduce(buf, buf, count, xcclFloat32, xcclSum, comm, nullptr);
  if (r != xcclSuccess) return r;
  xcclEvent_t ev;
  r = xcclEventRecord(&ev, comm);
  return r == xcclSuccess ? xcclEventWait(&ev, -1) : r;
}

// Ranks as threads of one process (the sanitizer builds' case: no fork): every message of
// 64 bytes or more is read in place, through every collective's schedule.
TEST(PeerRead, ThreadRanksOnXdevEveryCollective) {
  ScopedEnv min("XCCL_PEER_READ_MIN", "64");
  const int n = 3;
  const size_t count = 70001;
  xccl_test::MemoryStore store;
  xccl_test::runThreads(n, [&](int rank) {
    ASSERT_EQ(xdevSetDevice(rank), xdevSuccess);
    xcclConfig_t cfg{};
    cfg.device = rank;
    cfg.deviceType = xcclDeviceXdev;
    cfg.timeout_ms = 60000;
    xcclComm_t comm = nullptr;
    xccl_test::check(xcclCommInitRankStore(&comm, n, rank, store.c(), "pr/", &cfg), nullptr);
    float *a = nullptr, *g = nullptr, *r = nullptr;
    ASSERT_EQ(xdevMalloc(reinterpret_cast<void**>(&a), count * n * sizeof(float)), xdevSuccess);
    ASSERT_EQ(xdevMalloc(reinterpret_cast<void**>(&g), count * n * sizeof(float)), xdevSuccess);
    ASSERT_EQ(xdevMalloc(reinterpret_cast<void**>(&r), count * sizeof(float)), xdevSuccess);
    std::vector<float> host(count * n);
    for (size_t i = 0; i < host.size(); ++i) host[i] = float(i % 31 + rank);
    xdevMemcpy(a, host.data(), host.size() * sizeof(float), xdevMemcpyHostToDevice);
    xccl_test::check(xcclAllReduce(a, a, count, xcclFloat32, xcclSum, comm, nullptr), comm);
    xccl_test::check(xcclAllGather(a, g, count, xcclFloat32, comm, nullptr), comm);
    xccl_test::check(xcclReduceScatter(g, r, count, xcclFloat32, xcclSum, comm, nullptr), comm);
    xccl_test::check(xcclBroadcast(a, a, count, xcclFloat32, 2, comm, nullptr), comm);
    ASSERT_EQ(xdevDeviceSynchronize(), xdevSuccess);
    std::vector<float> ga(count * n), gr(count), ab(count);
    xdevMemcpy(ga.data(), g, ga.size() * sizeof(float), xdevMemcpyDeviceToHost);
    xdevMemcpy(gr.data(), r, gr.size() * sizeof(float), xdevMemcpyDeviceToHost);
    xdevMemcpy(ab.data(), a, ab.size() * sizeof(float), xdevMemcpyDeviceToHost);
    for (size_t i = 0; i < count; ++i) {
      const float sum = float(n * (i % 31) + n * (n - 1) / 2);  // the allreduce, on every rank
      ASSERT_EQ(ab[i], sum) << "allreduce/broadcast, rank " << rank << " i " << i;
      for (int q = 0; q < n; ++q) ASSERT_EQ(ga[q * count + i], sum) << "allgather";
      ASSERT_EQ(gr[i], sum * n) << "reducescatter";
    }
    xdevFree(a);
    xdevFree(g);
    xdevFree(r);
    xccl_test::check(xcclCommDestroy(comm), nullptr);
  });
}

TEST(PeerRead, InPlaceRingAllreducesStayExact) {
  ScopedEnv ring("XCCL_ALGO", "allreduce=ring");
  const int n = 3;
  const size_t count = (3u << 20) + 5;  // uneven blocks, 512 KiB slices, all read in place
  auto status = runXdevProcesses(
      n,
      [&](int rank, xcclComm_t comm) {
        float* buf = nullptr;
        if (xdevMalloc(reinterpret_cast<void**>(&buf), count * sizeof(float)) != xdevSuccess) {
          return 22;
        }
        std::vector<float> host(count);
        for (int round = 0; round < 6; ++round) {
          for (size_t i = 0; i < count; ++i) host[i] = float((i % 97) + rank + round);
          xdevMemcpy(buf, host.data(), count * sizeof(float), xdevMemcpyHostToDevice);
          if (allreduce(comm, buf, count) != xcclSuccess) {
            fprintf(stderr, "rank %d: %s\n", rank, xcclGetLastError(comm));
            return 23;
          }
          xdevMemcpy(host.data(), buf, count * sizeof(float), xdevMemcpyDeviceToHost);
          for (size_t i = 0; i < count; ++i) {
            const float want = float(n * ((i % 97) + round) + (n * (n - 1)) / 2);
            if (host[i] != want) {
              fprintf(stderr, "rank %d round %d: element %zu is %f, expected %f\n", rank, round, i,
                      host[i], want);
              return 24;
            }
          }
        }
        xcclCommDestroy(comm);
        return 0;
      },
      120);
  for (auto& [rank, st] : status) {
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank " << rank << " status " << st;
  }
}

// The victim kills itself at a random moment of a loop of 16 MiB allreduces, whose messages
// its peers read from its buffers in place. Every survivor must fail within a few seconds.
TEST(PeerRead, KilledPeerDuringPeerReadsMakesEverySurvivorRaise) {
  const int n = 3, victim = 1;
  const size_t count = 4u << 20;
  for (int trial = 0; trial < 3; ++trial) {
    SCOPED_TRACE(trial);
    const int delayMs = 20 + 60 * trial;
    auto status = runXdevProcesses(
        n,
        [&](int rank, xcclComm_t comm) {
          float* buf = nullptr;
          if (xdevMalloc(reinterpret_cast<void**>(&buf), count * sizeof(float)) != xdevSuccess) {
            return 22;
          }
          if (allreduce(comm, buf, count) != xcclSuccess) return 23;  // all are in
          if (rank == victim) {
            std::thread([delayMs] {
              std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
              raise(SIGKILL);
            }).detach();
          }
          auto t0 = Clock::now();
          xcclResult_t r = xcclSuccess;
          while (r == xcclSuccess && secondsSince(t0) < 30) r = allreduce(comm, buf, count);
          const double took = secondsSince(t0);
          fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank, xcclGetErrorString(r), took,
                  xcclGetLastError(comm));
          if (r == xcclSuccess) return 25;  // never noticed the dead peer
          return 0;
        },
        90);
    for (auto& [rank, st] : status) {
      if (rank == victim) {
        EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "victim status " << st;
      } else {
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank " << rank << " status " << st;
      }
    }
  }
}

}  // namespace
