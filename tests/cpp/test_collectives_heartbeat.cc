// Heartbeats (core/heartbeat.h): a peer that stops (SIGSTOP) makes the operations waiting
// on it fail within XCCL_HEARTBEAT_MS + XCCL_HEARTBEAT_TIMEOUT_MS, over shared memory and
// over TCP, naming it; a peer that is only late, or stopped for less than the timeout, is not
// a failure; and xcclCommAbort from another thread ends a wait on a silent peer when
// heartbeats are off. Ranks are forked processes; the parent kills what is left and fails
// the test if any rank outlives its hard timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "xccl.h"

namespace {

using Clock = std::chrono::steady_clock;
using xccl_test::check;
using xccl_test::ScopedEnv;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What one rank does; its return value is its exit code (0 = as expected).
using RankFn = std::function<int(int rank, xcclComm_t comm)>;

// Forks n ranks that make a communicator and run fn. `during(pids)` runs in the parent while
// they do (it may stop and continue them). Ranks in `killAfter` are SIGKILLed once every
// other rank has exited. Returns the exit codes (-signal for a killed rank).
std::vector<int> runRanks(int n, const RankFn& fn, const std::vector<int>& killAfter = {},
                          const std::function<void(const std::vector<pid_t>&)>& during = {},
                          int timeoutSec = 60) {
  xcclUniqueId id;
  EXPECT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  std::vector<pid_t> pids(n);
  for (int r = 0; r < n; ++r) {
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 3;
      try {
        xcclConfig_t cfg{};
        cfg.timeout_ms = 60000;
        cfg.device = -1;
        xcclComm_t comm = nullptr;
        check(xcclCommInitRankConfig(&comm, n, id, r, &cfg));
        rc = fn(r, comm);
        xcclCommAbort(comm);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d threw: %s\n", r, e.what());
      }
      fflush(stderr);
      _exit(rc);
    }
    pids[r] = pid;
  }
  if (during) during(pids);
  std::vector<int> codes(n, 999);
  std::vector<bool> done(n, false);
  auto until = Clock::now() + std::chrono::seconds(timeoutSec);
  auto waitingFor = [&] {
    int left = 0;
    for (int r = 0; r < n; ++r) {
      bool exempt = std::find(killAfter.begin(), killAfter.end(), r) != killAfter.end();
      left += !done[r] && !exempt;
    }
    return left;
  };
  while (waitingFor() > 0 && Clock::now() < until) {
    for (int r = 0; r < n; ++r) {
      int st = 0;
      if (!done[r] && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        done[r] = true;
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < n; ++r) {
    if (done[r]) continue;
    bool exempt = std::find(killAfter.begin(), killAfter.end(), r) != killAfter.end();
    if (!exempt) ADD_FAILURE() << "rank " << r << " hung: killed after " << timeoutSec << " s";
    kill(pids[r], SIGKILL);
    kill(pids[r], SIGCONT);
    int st = 0;
    waitpid(pids[r], &st, 0);
    codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  }
  return codes;
}

// One allreduce of `count` floats of 1; returns the result code and checks the sum when it
// succeeded.
xcclResult_t allreduceOnce(xcclComm_t comm, int n, size_t count, int64_t waitMs = -1) {
  std::vector<float> a(count, 1.0f);
  xcclResult_t r = xcclAllReduce(a.data(), a.data(), count, xcclFloat32, xcclSum, comm, nullptr);
  if (r != xcclSuccess) return r;
  xcclEvent_t ev;
  r = xcclEventRecord(&ev, comm);
  if (r == xcclSuccess) r = xcclEventWait(&ev, waitMs);
  if (r == xcclSuccess && (a[0] != n || a[count - 1] != n)) {
    fprintf(stderr, "wrong sum %f\n", a[0]);
    return xcclInternalError;
  }
  return r;
}

class StoppedPeer : public testing::TestWithParam<const char*> {};

// The victim stops itself after a first allreduce; the others' next allreduce must fail
// within interval + timeout (+ slack for this 2-core machine), naming the victim.
TEST_P(StoppedPeer, IsFoundWithinTheHeartbeatTimeout) {
  const bool tcp = std::string(GetParam()) == "tcp";
  ScopedEnv shm("XCCL_SHM_DISABLE", tcp ? "1" : "0");
  ScopedEnv interval("XCCL_HEARTBEAT_MS", "200");
  ScopedEnv timeout("XCCL_HEARTBEAT_TIMEOUT_MS", "1500");
  const int n = 3, victim = 2;
  auto codes = runRanks(n,
                        [&](int rank, xcclComm_t comm) {
                          if (allreduceOnce(comm, n, 1 << 16) != xcclSuccess) return 4;
                          if (rank == victim) {
                            raise(SIGSTOP);
                            return 0;  // not reached: killed while stopped
                          }
                          auto t0 = Clock::now();
                          xcclResult_t r = allreduceOnce(comm, n, 1 << 16);
                          const double took = secondsSince(t0);
                          const std::string why = xcclGetLastError(comm);
                          fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank,
                                  xcclGetErrorString(r), took, why.c_str());
                          if (r == xcclSuccess) return 5;
                          // Every survivor raises: the one whose ring neighbour is the victim
                          // because it went silent, the other because the first failed (or because
                          // the victim did).
                          if (took > 0.2 + 1.5 + 3.0)
                            return 6;  // interval + timeout + slack, not 60 s
                          if (why.find("rank 2") == std::string::npos) return 7;
                          return 0;
                        },
                        {victim});
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    EXPECT_EQ(codes[r], 0) << "rank " << r << " (see its line above)";
  }
}

// The message of the rank that waits on the victim itself: which rank, and why.
TEST_P(StoppedPeer, TheWaitingRankSaysWhoWentSilentAndWhy) {
  const bool tcp = std::string(GetParam()) == "tcp";
  ScopedEnv shm("XCCL_SHM_DISABLE", tcp ? "1" : "0");
  ScopedEnv interval("XCCL_HEARTBEAT_MS", "100");
  ScopedEnv timeout("XCCL_HEARTBEAT_TIMEOUT_MS", "1000");
  auto codes = runRanks(2,
                        [&](int rank, xcclComm_t comm) {
                          if (allreduceOnce(comm, 2, 1024) != xcclSuccess) return 4;
                          if (rank == 1) raise(SIGSTOP);
                          xcclResult_t r = allreduceOnce(comm, 2, 1024);
                          const std::string why = xcclGetLastError(comm);
                          fprintf(stderr, "rank 0: %s\n", why.c_str());
                          if (r == xcclSuccess) return 5;
                          if (why.find("rank 1 (") == std::string::npos ||
                              why.find("went silent") == std::string::npos ||
                              why.find("sent no heartbeat") == std::string::npos) {
                            return 6;
                          }
                          // Over shared memory the peer's process is visible: say that it is
                          // stopped.
                          if (!tcp && why.find("is stopped") == std::string::npos) return 7;
                          return 0;
                        },
                        {1});
  EXPECT_EQ(codes[0], 0);
}

// A peer stopped for less than the timeout, then continued, is not a failure.
TEST_P(StoppedPeer, BriefStopIsNotAFailure) {
  const bool tcp = std::string(GetParam()) == "tcp";
  ScopedEnv shm("XCCL_SHM_DISABLE", tcp ? "1" : "0");
  ScopedEnv interval("XCCL_HEARTBEAT_MS", "100");
  ScopedEnv timeout("XCCL_HEARTBEAT_TIMEOUT_MS", "3000");
  auto codes = runRanks(
      2,
      [&](int rank, xcclComm_t comm) {
        if (allreduceOnce(comm, 2, 1024) != xcclSuccess) return 4;
        if (rank == 1) raise(SIGSTOP);  // the parent continues it
        for (int k = 0; k < 3; ++k) {
          if (allreduceOnce(comm, 2, 1 << 18) != xcclSuccess) {
            fprintf(stderr, "rank %d: %s\n", rank, xcclGetLastError(comm));
            return 5;
          }
        }
        return 0;
      },
      {},
      [](const std::vector<pid_t>& pids) {
        // Wait until rank 1 is stopped, leave it so for 500 ms, then continue it.
        for (int i = 0; i < 2000; ++i) {
          int st = 0;
          if (waitpid(pids[1], &st, WNOHANG | WUNTRACED) == pids[1] && WIFSTOPPED(st)) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        kill(pids[1], SIGCONT);
      });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

// A send whose last bytes sit in the TCP user-space ring (the message is committed, the
// socket full because the peer stopped reading) waits for them to leave before it reports
// completion: the peer's silence must end that wait too, not only waits on posted messages.
// (Point-to-point: no check frame, so nothing else is posted for the peer.)
TEST(Heartbeat, BytesParkedForAStoppedPeerDoNotEscapeIt) {
  ScopedEnv shm("XCCL_SHM_DISABLE", "1");
  ScopedEnv ring("XCCL_SOCKET_BUFFSIZE", std::to_string(96 << 20).c_str());
  ScopedEnv interval("XCCL_HEARTBEAT_MS", "100");
  ScopedEnv timeout("XCCL_HEARTBEAT_TIMEOUT_MS", "1000");
  auto codes = runRanks(
      2,
      [&](int rank, xcclComm_t comm) {
        if (allreduceOnce(comm, 2, 1024) != xcclSuccess) return 4;
        if (rank == 1) raise(SIGSTOP);
        const size_t count = 16u << 20;  // 64 MiB: more than the kernel's socket buffers hold
        std::vector<float> a(count, 1.0f);
        auto t0 = Clock::now();
        xcclResult_t r = xcclSend(a.data(), count, xcclFloat32, 1, comm, nullptr);
        if (r == xcclSuccess) {
          xcclEvent_t ev;
          r = xcclEventRecord(&ev, comm);
          if (r == xcclSuccess) r = xcclEventWait(&ev, -1);
        }
        const double took = secondsSince(t0);
        fprintf(stderr, "rank 0: %s after %.2f s: %s\n", xcclGetErrorString(r), took,
                xcclGetLastError(comm));
        if (r == xcclSuccess) return 5;
        if (took > 0.1 + 1.0 + 3.0) return 6;
        if (std::string(xcclGetLastError(comm)).find("rank 1") == std::string::npos) return 7;
        return 0;
      },
      {1});
  EXPECT_EQ(codes[0], 0);
}

INSTANTIATE_TEST_SUITE_P(Transports, StoppedPeer, testing::Values("shm", "tcp"),
                         [](const testing::TestParamInfo<const char*>& p) { return p.param; });

// A late peer is alive: its heartbeats keep a waiting rank from failing however long it
// waits (here 4x the heartbeat timeout), and being idle longer than the timeout is fine.
TEST(Heartbeat, LateOrIdlePeerIsNotSilent) {
  ScopedEnv interval("XCCL_HEARTBEAT_MS", "100");
  ScopedEnv timeout("XCCL_HEARTBEAT_TIMEOUT_MS", "500");
  auto codes = runRanks(3, [&](int rank, xcclComm_t comm) {
    if (allreduceOnce(comm, 3, 4096) != xcclSuccess) return 4;
    std::this_thread::sleep_for(std::chrono::milliseconds(rank == 2 ? 2000 : 800));
    if (allreduceOnce(comm, 3, 4096) != xcclSuccess) {
      fprintf(stderr, "rank %d: %s\n", rank, xcclGetLastError(comm));
      return 5;
    }
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// With heartbeats off a stopped peer is silent forever; xcclCommAbort from another thread
// than the one that enqueued stops the operation waiting on it at once (the progress thread
// sees the abort flag), instead of after the 60 s timeout.
TEST(Heartbeat, AbortFromAnotherThreadEndsAWaitOnASilentPeer) {
  ScopedEnv off("XCCL_HEARTBEAT_MS", "0");
  auto codes = runRanks(
      2,
      [&](int rank, xcclComm_t comm) {
        if (allreduceOnce(comm, 2, 1024) != xcclSuccess) return 4;
        if (rank == 1) raise(SIGSTOP);
        std::vector<float> a(1024, 1.0f);
        check(xcclAllReduce(a.data(), a.data(), a.size(), xcclFloat32, xcclSum, comm, nullptr),
              comm);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // it is waiting now
        xcclEvent_t ev;
        check(xcclEventRecord(&ev, comm), comm);
        if (xcclEventQuery(&ev) != xcclInProgress) return 5;
        double took = 0;
        xcclResult_t r = xcclSuccess;
        std::thread aborter([&] {
          auto t0 = Clock::now();
          r = xcclCommAbort(comm);
          took = secondsSince(t0);
        });
        aborter.join();
        fprintf(stderr, "rank 0: xcclCommAbort from another thread took %.2f s\n", took);
        if (r != xcclSuccess) return 6;
        if (took > 3.0) return 7;
        _exit(0);  // the communicator is gone: runRanks must not abort it again
      },
      {1});
  EXPECT_EQ(codes[0], 0);
}

}  // namespace
