// Connections on first use (XCCL_RUNTIME_CONNECT: transport/shm/arena.h, tcp/lazy.cc): a
// communicator connects only the pairs its operations use, xcclCommGetStats says so, an alltoall
// connects them all, eager set-up still connects every pair; a peer that left before the pair was
// connected fails the operation that needs it instead of hanging; a peer that is late to its
// first operation is still heard (the arena carries its heartbeat); and a process with a
// runnable thread counts as alive (the heartbeat's kernel witness, common/process.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/process.h"
#include "test_collectives_common.h"

namespace xccl_coll_test {
namespace {

using xccl_test::check;
using xccl_test::ScopedEnv;

xcclCommStats_t statsOf(xcclComm_t comm) {
  xcclCommStats_t st{};
  check(xcclCommGetStats(comm, &st), comm);
  return st;
}

void allreduceOnce(xcclComm_t comm, int n) {
  std::vector<float> a(16, 1.0f);
  check(xcclAllReduce(a.data(), a.data(), a.size(), xcclFloat32, xcclSum, comm, nullptr), comm);
  waitAll(comm);
  EXPECT_EQ(a[0], static_cast<float>(n));
}

// 8 ranks, recursive doubling: each connects its partners at distance 1, 2 and 4 and its
// ring neighbours (the desync check frame), nothing at creation; an alltoall then connects
// every pair. Over SHM (the arena) or over TCP (the lower rank connects, the higher rank's
// acceptor thread answers: tcp/lazy.cc).
void expectOnlyUsedPairsConnected(bool tcp) {
  ScopedEnv shmOff("XCCL_SHM_DISABLE", tcp ? "1" : nullptr);
  ScopedEnv algo("XCCL_ALGO", "allreduce=recdoubling");
  const int n = 8;
  auto connected = [tcp](const xcclCommStats_t& st) {
    return tcp ? st.tcpConnected : st.shmConnected;
  };
  ThreadWorld world(n);
  world.run([&](int rank, xcclComm_t comm) {
    xcclCommStats_t st = statsOf(comm);
    EXPECT_EQ(st.peers, n - 1);
    EXPECT_EQ(connected(st), 0) << "rank " << rank << " connected before any operation";
    EXPECT_EQ(st.onFirstUse, n - 1);
    allreduceOnce(comm, n);
    const std::set<int> used = {rank ^ 1, rank ^ 2, rank ^ 4, (rank + 1) % n, (rank + n - 1) % n};
    st = statsOf(comm);
    EXPECT_EQ(connected(st), static_cast<int>(used.size())) << "rank " << rank;
    EXPECT_EQ(st.onFirstUse, n - 1 - static_cast<int>(used.size())) << "rank " << rank;
    EXPECT_EQ(tcp ? st.shmConnected : st.tcpConnected, 0);
    if (!tcp) EXPECT_GT(st.shmBytes, 0);
    EXPECT_GT(st.processFds, 0);
    EXPECT_GT(st.processThreads, n);  // every rank has its progress and heartbeat threads
    allreduceOnce(comm, n);           // again, on the connections made
  });
  world.run([&](int rank, xcclComm_t comm) {  // alltoall needs every pair
    std::vector<float> in(n, static_cast<float>(rank)), out(n, -1.0f);
    check(xcclAllToAll(in.data(), out.data(), 1, xcclFloat32, comm, nullptr), comm);
    waitAll(comm);
    for (int p = 0; p < n; ++p) EXPECT_EQ(out[p], static_cast<float>(p));
    xcclCommStats_t st = statsOf(comm);
    EXPECT_EQ(connected(st), n - 1);
    EXPECT_EQ(st.onFirstUse, 0);
  });
}

TEST(RuntimeConnect, OnlyThePairsAnAlgorithmUsesAreConnected) {
  expectOnlyUsedPairsConnected(/*tcp=*/false);
}

TEST(RuntimeConnect, TcpPairsConnectWhenAnOperationFirstUsesThem) {
  expectOnlyUsedPairsConnected(/*tcp=*/true);
}

TEST(RuntimeConnect, EagerTcpSetUpConnectsEveryPairAtCreation) {
  ScopedEnv tcp("XCCL_SHM_DISABLE", "1");
  ScopedEnv eager("XCCL_RUNTIME_CONNECT", "0");
  const int n = 4;
  ThreadWorld world(n);
  world.run([&](int, xcclComm_t comm) {
    xcclCommStats_t st = statsOf(comm);
    EXPECT_EQ(st.tcpConnected, n - 1);
    EXPECT_EQ(st.onFirstUse, 0);
    allreduceOnce(comm, n);
  });
}

TEST(RuntimeConnect, EagerSetUpConnectsEveryPairAtCreation) {
  ScopedEnv eager("XCCL_RUNTIME_CONNECT", "0");
  const int n = 4;
  ThreadWorld world(n);
  world.run([&](int, xcclComm_t comm) {
    xcclCommStats_t st = statsOf(comm);
    EXPECT_EQ(st.shmConnected, n - 1);
    EXPECT_EQ(st.onFirstUse, 0);
    allreduceOnce(comm, n);
  });
}

TEST(RuntimeConnect, StatsRejectANullOutput) {
  ThreadWorld world(2);
  EXPECT_EQ(xcclCommGetStats(world.comm(0), nullptr), xcclInvalidArgument);
}

// One rank destroys its communicator before the other ever talked to it: the other's first
// operation with it fails (naming it) instead of waiting for the timeout. Over SHM (the
// arena), and over TCP both ways: the lower rank's connect is refused, and the higher rank,
// waiting for the lower one to connect, finds its listener closed.
void expectAGonePeerFailsTheFirstOperation(int gone) {
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  xccl_test::runProcesses(
      2,
      [&](int rank) {
        xcclComm_t comm = initHostRank(id, 2, rank);
        if (rank == gone) {
          check(xcclCommDestroy(comm));
          std::this_thread::sleep_for(std::chrono::seconds(3));  // alive, communicator gone
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<float> a(16, 1.0f);
        xcclResult_t r =
            xcclAllReduce(a.data(), a.data(), a.size(), xcclFloat32, xcclSum, comm, nullptr);
        if (r == xcclSuccess) {
          xcclEvent_t ev;
          r = xcclEventRecord(&ev, comm);
          if (r == xcclSuccess) r = xcclEventWait(&ev, 20000);
        }
        const double took =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::string why = xcclGetLastError(comm);
        EXPECT_NE(r, xcclSuccess);
        EXPECT_NE(r, xcclTimeout) << why;
        EXPECT_LT(took, 5.0) << why;
        EXPECT_NE(why.find("rank " + std::to_string(gone)), std::string::npos) << why;
        xcclCommAbort(comm);
      },
      60);
}

TEST(RuntimeConnect, APeerGoneBeforeThePairConnectedFailsTheOperation) {
  expectAGonePeerFailsTheFirstOperation(1);
}

TEST(RuntimeConnect, APeerGoneBeforeTheTcpPairConnectedFailsTheOperationEitherWay) {
  ScopedEnv tcp("XCCL_SHM_DISABLE", "1");
  expectAGonePeerFailsTheFirstOperation(1);  // the lower rank's connect is refused
  expectAGonePeerFailsTheFirstOperation(0);  // the higher rank finds no listener
}

// A peer late to its first operation has no connection object for us yet; its heartbeat
// still reaches us (SHM: through its arena; TCP: its acceptor thread beats on the
// connection we made until its engine takes it), so the wait is not a failure. Over TCP the
// late rank is once the highest (the others connect to it) and once the lowest (the others
// wait for it to connect).
void expectALatePeerIsStillHeard(int late) {
  ScopedEnv interval("XCCL_HEARTBEAT_MS", "100");
  ScopedEnv timeout("XCCL_HEARTBEAT_TIMEOUT_MS", "800");
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  const int n = 3;
  xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclComm_t comm = initHostRank(id, n, rank);
        if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        allreduceOnce(comm, n);
        check(xcclCommDestroy(comm));
      },
      60);
}

TEST(RuntimeConnect, APeerLateToItsFirstOperationIsStillHeard) { expectALatePeerIsStillHeard(2); }

TEST(RuntimeConnect, APeerLateToItsFirstTcpOperationIsStillHeard) {
  ScopedEnv tcp("XCCL_SHM_DISABLE", "1");
  expectALatePeerIsStillHeard(2);
  expectALatePeerIsStillHeard(0);
}

TEST(ProcessState, ARunnableThreadIsSeenAndASleepingProcessIsNot) {
  pid_t busy = fork();
  if (busy == 0) {
    for (volatile uint64_t i = 0;; i = i + 1) {
    }
  }
  pid_t idle = fork();
  if (idle == 0) {
    pause();
    _exit(0);
  }
  bool sawBusy = false;
  for (int i = 0; i < 200 && !sawBusy; ++i) {  // a spinning process is R (running or queued)
    sawBusy = xccl::processHasRunnableThread(busy);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(sawBusy);
  EXPECT_FALSE(xccl::processHasRunnableThread(idle));
  kill(busy, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(xccl::processHasRunnableThread(busy)) << "a stopped process is not runnable";
  for (pid_t p : {busy, idle}) {
    kill(p, SIGKILL);
    int st = 0;
    waitpid(p, &st, 0);
  }
  EXPECT_FALSE(xccl::processHasRunnableThread(busy)) << "a reaped process is gone";
}

}  // namespace
}  // namespace xccl_coll_test
