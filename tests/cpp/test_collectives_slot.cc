// The slot path (algorithms/slot.cc): small allreduces between the processes of one host
// through shared slots, without frames. What the frames did for the engine the slots must do
// themselves: a rank that calls something else after the slots are made, or calls with
// nothing to move, fails every rank naming both calls; a rank whose communicator fails, or
// whose process dies, releases the peers waiting on its slot at once; and the result is the
// rank-order fold.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "test_collectives_common.h"
#include "test_util.h"

namespace xccl_coll_test {
namespace {

using Clock = std::chrono::steady_clock;

xcclResult_t waitResult(xcclComm_t comm) {
  xcclEvent_t ev;
  xcclResult_t r = xcclEventRecord(&ev, comm);
  return r != xcclSuccess ? r : xcclEventWait(&ev, -1);
}

// One slot allreduce that every rank makes (the slots are set up by it), checked.
void firstSlotCall(int rank, int n, xcclComm_t comm) {
  Buf in(xcclFloat32, 16), out(xcclFloat32, 16);
  for (size_t i = 0; i < 16; ++i) in.set(i, rank + 1);
  ASSERT_EQ(
      xcclAllReduce(in.data(), out.data(), 16, xcclFloat32, xcclSum, comm, XCCL_STREAM_CALLER),
      xcclSuccess)
      << xcclGetLastError(comm);
  for (size_t i = 0; i < 16; ++i) ASSERT_EQ(out.get(i), n * (n + 1) / 2.0);
}

TEST(Slot, TheResultIsTheRankOrderFold) {
  xccl_test::ScopedEnv algo("XCCL_ALGO", "allreduce=slot");
  ThreadWorld world(3);
  world.run([&](int rank, xcclComm_t comm) {
    // In float32, (1e8 + -1e8) + 1 is 1 (rank order); 1e8 + (-1e8 + 1) and (1e8 + 1) + -1e8
    // are 0 (1 is lost against 1e8).
    const float v[3] = {1e8f, -1e8f, 1.0f};
    Buf in(xcclFloat32, 5), out(xcclFloat32, 5);
    for (size_t i = 0; i < 5; ++i) in.set(i, v[rank]);
    for (int round = 0; round < 4; ++round) {  // both halves of the slot, twice
      ASSERT_EQ(xcclAllReduce(in.data(), out.data(), 5, xcclFloat32, xcclSum, comm, nullptr),
                xcclSuccess);
      ASSERT_EQ(waitResult(comm), xcclSuccess) << xcclGetLastError(comm);
      for (size_t i = 0; i < 5; ++i) ASSERT_EQ(out.get(i), 1.0);
    }
  });
}

// After the slots are made: another collective, or a call with nothing to move.
TEST(Slot, ADisagreementAfterTheSlotsAreMadeFailsEveryRankNamingBoth) {
  for (const char* kind : {"broadcast", "count0", "count"}) {
    SCOPED_TRACE(kind);
    ThreadWorld world(3, nullptr, /*timeoutMs=*/60000);
    world.run([&](int rank, xcclComm_t comm) {
      firstSlotCall(rank, 3, comm);
      const bool differs = rank == 2;
      Buf in(xcclFloat32, 65), out(xcclFloat32, 65);  // room for the differing count
      in.fill(1);
      const auto t0 = Clock::now();
      xcclResult_t r;
      if (differs && std::string(kind) == "broadcast") {
        r = xcclBroadcast(in.data(), out.data(), 64, xcclFloat32, 0, comm, nullptr);
      } else {
        const size_t count = differs ? (std::string(kind) == "count0" ? 0 : 65) : 64;
        r = xcclAllReduce(in.data(), out.data(), count, xcclFloat32, xcclSum, comm, nullptr);
      }
      if (r == xcclSuccess) r = waitResult(comm);
      EXPECT_NE(r, xcclSuccess) << "rank " << rank << " returned";
      const std::string err = xcclGetLastError(comm);
      if (differs) EXPECT_NE(err.find("mismatch"), std::string::npos) << err;
      EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20.0)
          << "rank " << rank << " waited for the timeout: " << err;
    });
  }
}

TEST(Slot, AFailedRankReleasesThePeersWaitingOnItsSlot) {
  ThreadWorld world(3, nullptr, /*timeoutMs=*/60000);
  world.run([&](int rank, xcclComm_t comm) {
    firstSlotCall(rank, 3, comm);
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      xcclCommRevoke(comm);  // fails it: its slot says so
      return;
    }
    Buf in(xcclFloat32, 8), out(xcclFloat32, 8);
    const auto t0 = Clock::now();
    xcclResult_t r =
        xcclAllReduce(in.data(), out.data(), 8, xcclFloat32, xcclSum, comm, XCCL_STREAM_CALLER);
    EXPECT_NE(r, xcclSuccess);
    const std::string err = xcclGetLastError(comm);
    EXPECT_NE(err.find("rank 2 failed before it reached allreduce(float32, 8, sum)"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("rank 2 revoked the communicator"), std::string::npos) << err;
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0) << err;
  });
}

// Processes: rank 1 is SIGKILLed while rank 0 waits on its slot.
TEST(Slot, ADeadPeerIsNamedWithinMilliseconds) {
  xcclUniqueId id;
  xccl_test::check(xcclGetUniqueId(&id));
  auto status = xccl_test::runProcesses(
      2,
      [&](int rank) {
        xcclComm_t comm = xccl_test::initProcessComm(id, 2, rank, 20000);
        firstSlotCall(rank, 2, comm);
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          raise(SIGKILL);
        }
        Buf in(xcclFloat32, 8), out(xcclFloat32, 8);
        const auto t0 = Clock::now();
        xcclResult_t r =
            xcclAllReduce(in.data(), out.data(), 8, xcclFloat32, xcclSum, comm, XCCL_STREAM_CALLER);
        const std::string err = xcclGetLastError(comm);
        EXPECT_NE(r, xcclSuccess);
        EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
        EXPECT_NE(err.find("died"), std::string::npos) << err;
        EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2)) << err;
        xcclCommAbort(comm);
      },
      60, /*expectAllSucceed=*/false);
  ASSERT_EQ(status.size(), 2u);
  EXPECT_TRUE(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0);
  EXPECT_TRUE(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL);
}

// The slot path's limit depends on whether the host's ranks outnumber its cores. Ranks that
// may run on different numbers of CPUs (one pinned to a single CPU) must still choose alike,
// or a 32 KiB allreduce would take the slots on one rank and the engine on the other: each
// rank decides from every rank's core count (the peer records), not its own.
TEST(Slot, RanksWithDifferentCoreCountsChooseAlike) {
  xccl_test::ScopedEnv unset("XCCL_SLOT_MAX", nullptr);
  xcclUniqueId id;
  xccl_test::check(xcclGetUniqueId(&id));
  xccl_test::runProcesses(
      2,
      [&](int rank) {
        if (rank == 1) {  // one CPU of those it may run on
          cpu_set_t all, one;
          ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
          CPU_ZERO(&one);
          for (int c = 0; c < CPU_SETSIZE; ++c) {
            if (CPU_ISSET(c, &all)) {
              CPU_SET(c, &one);
              break;
            }
          }
          ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
        }
        xcclComm_t comm = xccl_test::initProcessComm(id, 2, rank, 20000);
        for (size_t count : {size_t{2048}, size_t{8192}, size_t{16384}, size_t{65536}}) {
          Buf in(xcclFloat32, count), out(xcclFloat32, count);  // 8 to 256 KiB
          for (size_t i = 0; i < count; ++i) in.set(i, rank + 1 + i % 7);
          ASSERT_EQ(xcclAllReduce(in.data(), out.data(), count, xcclFloat32, xcclSum, comm,
                                  XCCL_STREAM_CALLER),
                    xcclSuccess)
              << count << ": " << xcclGetLastError(comm);
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(out.get(i), 3 + 2 * (i % 7)) << i;
        }
        xccl_test::check(xcclCommDestroy(comm));
      },
      60);
}

}  // namespace
}  // namespace xccl_coll_test
