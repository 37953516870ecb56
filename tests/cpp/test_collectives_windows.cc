// Windows and one-sided put/signal (core/windows.h): puts around a ring of processes land
// whole before their signal is counted, bare signals add up, and bad input (sizes that
// differ, memory peers cannot map, a put outside the window, a peer on another host, a peer
// that exited while awaited) is refused with the reason instead of corrupting or hanging.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/bootstrap/bootstrap_internal.h"
#include "test_util.h"
#include "xccl.h"

namespace {

using xccl_test::check;

std::string lastError() { return xcclGetLastError(nullptr); }

xcclResult_t waitOne(xcclComm_t comm, int peer, int sigIdx, int opCnt) {
  xcclWaitSignalDesc_t d{opCnt, peer, sigIdx, 0};
  return xcclWaitSignal(1, &d, comm, nullptr);
}

// 3 processes: each round, every rank puts a block into its right neighbour's window (the
// slot of this round) with a signal, then waits for its left neighbour's; the block must
// be whole. Then two bare signals answered by one wait of 2, and a put into itself.
TEST(Windows, PutsAroundARingLandWholeBeforeTheirSignal) {
  const int n = 3;
  const size_t block = 300001, rounds = 6;  // floats; blocks not page multiples
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclComm_t comm = xccl_test::initProcessComm(id, n, rank);
        const size_t bytes = block * rounds * sizeof(float);
        float* winMem = nullptr;
        check(xcclMemAlloc(reinterpret_cast<void**>(&winMem), bytes));
        xcclWindow_t win = nullptr;
        check(xcclCommWindowRegister(comm, winMem, bytes, &win, 0), comm);
        const int right = (rank + 1) % n, left = (rank + n - 1) % n;
        std::vector<float> mine(block);
        for (size_t r = 0; r < rounds; ++r) {
          for (size_t i = 0; i < block; ++i) mine[i] = float(rank * 1000003 + r * 7919 + i % 4093);
          check(
              xcclPutSignal(mine.data(), block, xcclFloat32, right, win, r * block * sizeof(float),
                            /*sigIdx=*/3, 0, 0, comm, nullptr),
              comm);
          check(waitOne(comm, left, 3, 1), comm);
          const float* got = winMem + r * block;
          for (size_t i = 0; i < block; ++i) {
            ASSERT_EQ(got[i], float(left * 1000003 + r * 7919 + i % 4093))
                << "rank " << rank << " round " << r << " element " << i;
          }
        }
        // Two bare signals, one wait for both; a put into this rank's own window.
        check(xcclSignal(right, 5, 0, 0, comm, nullptr), comm);
        check(xcclSignal(right, 5, 0, 0, comm, XCCL_STREAM_CALLER), comm);
        check(waitOne(comm, left, 5, 2), comm);
        float x = 42.0f;
        check(xcclPutSignal(&x, 1, xcclFloat32, rank, win, 0, 0, 0, 0, comm, nullptr), comm);
        check(waitOne(comm, rank, 0, 1), comm);
        EXPECT_EQ(winMem[0], 42.0f);
        check(xcclCommWindowDeregister(comm, win), comm);
        check(xcclMemFree(winMem));
        check(xcclCommDestroy(comm));
      },
      120);
}

TEST(Windows, BadInputIsRefusedNamingTheRankAndTheRange) {
  xccl_test::MemoryStore store;
  xccl_test::runThreads(2, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, 2, rank, "win/");
    char* mem = nullptr;
    check(xcclMemAlloc(reinterpret_cast<void**>(&mem), 1 << 16));
    xcclWindow_t win = nullptr;
    // No window yet: signals have nowhere to go.
    EXPECT_EQ(xcclSignal(1 - rank, 0, 0, 0, comm, nullptr), xcclInvalidUsage);
    // Sizes that differ: both ranks fail, each naming the other's size.
    EXPECT_EQ(xcclCommWindowRegister(comm, mem, rank == 0 ? 4096 : 8192, &win, 0),
              xcclInvalidArgument);
    EXPECT_NE(lastError().find("windows differ in size"), std::string::npos) << lastError();
    EXPECT_EQ(win, nullptr);
    // Plain memory on rank 1: both fail, naming rank 1.
    std::vector<char> plain(4096);
    EXPECT_EQ(xcclCommWindowRegister(comm, rank == 1 ? plain.data() : mem, 4096, &win, 0),
              xcclInvalidArgument);
    EXPECT_NE(lastError().find("rank 1's window is not memory"), std::string::npos) << lastError();
    // A good one, then puts outside it and bad arguments.
    ASSERT_EQ(xcclCommWindowRegister(comm, mem, 4096, &win, 0), xcclSuccess) << lastError();
    char src[64] = {};
    const int peer = 1 - rank;
    EXPECT_EQ(xcclPutSignal(src, 64, xcclUint8, peer, win, 4090, 0, 0, 0, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_NE(lastError().find("outside rank " + std::to_string(peer) + "'s window of 4096"),
              std::string::npos)
        << lastError();
    EXPECT_EQ(xcclPutSignal(src, 1, xcclUint8, peer, win, SIZE_MAX, 0, 0, 0, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclPutSignal(src, 1, xcclUint8, 2, win, 0, 0, 0, 0, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclPutSignal(src, 1, xcclUint8, peer, win, 0, 16, 0, 0, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclPutSignal(src, 1, xcclUint8, peer, win, 0, 0, 1, 0, comm, nullptr),
              xcclInvalidArgument);
    xcclWaitSignalDesc_t bad{1, peer, -1, 0};
    EXPECT_EQ(xcclWaitSignal(1, &bad, comm, nullptr), xcclInvalidArgument);
    // A window of another communicator (or none) is refused; so is deregistering twice.
    int junk = 0;
    EXPECT_EQ(xcclPutSignal(src, 1, xcclUint8, peer, reinterpret_cast<xcclWindow_t>(&junk), 0, 0, 0,
                            0, comm, nullptr),
              xcclInvalidArgument);
    // The communicator still works, and the window too.
    check(xcclPutSignal(src, 8, xcclUint8, peer, win, 8, 1, 0, 0, comm, nullptr), comm);
    check(waitOne(comm, peer, 1, 1), comm);
    check(xcclCommWindowDeregister(comm, win), comm);
    EXPECT_EQ(xcclCommWindowDeregister(comm, win), xcclInvalidArgument);
    check(xcclMemFree(mem));
    check(xcclCommDestroy(comm));
  });
}

// Ranks on two (faked) hosts: the window reaches no rank of the other host.
TEST(Windows, APeerOnAnotherHostIsRefused) {
  xccl_test::MemoryStore store;
  xccl_test::runThreads(2, [&](int rank) {
    xccl::setThreadHostIdOverride(rank == 0 ? "win-host-a" : "win-host-b");
    xcclComm_t comm = xccl_test::initThreadComm(store, 2, rank, "winh/");
    void* mem = nullptr;
    check(xcclMemAlloc(&mem, 4096));
    xcclWindow_t win = nullptr;
    ASSERT_EQ(xcclCommWindowRegister(comm, mem, 4096, &win, 0), xcclSuccess) << lastError();
    char b = 1;
    EXPECT_EQ(xcclPutSignal(&b, 1, xcclUint8, 1 - rank, win, 0, 0, 0, 0, comm, nullptr),
              xcclInvalidUsage);
    EXPECT_NE(lastError().find("on another host"), std::string::npos) << lastError();
    check(xcclCommWindowDeregister(comm, win), comm);
    check(xcclMemFree(mem));
    check(xcclCommDestroy(comm));
    xccl::setThreadHostIdOverride("");
  });
}

// The awaited peer exits: the wait fails at once, naming it, instead of waiting out the
// 60 s timeout.
TEST(Windows, AWaitForAPeerThatExitedFailsNamingIt) {
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  xccl_test::runProcesses(
      2,
      [&](int rank) {
        xcclComm_t comm = xccl_test::initProcessComm(id, 2, rank);
        void* mem = nullptr;
        check(xcclMemAlloc(&mem, 4096));
        xcclWindow_t win = nullptr;
        check(xcclCommWindowRegister(comm, mem, 4096, &win, 0), comm);
        if (rank == 1) _exit(0);  // leaves without a signal
        const auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(waitOne(comm, 1, 0, 1), xcclRemoteError);
        EXPECT_NE(lastError().find("rank 1 (pid"), std::string::npos) << lastError();
        EXPECT_NE(lastError().find("exited"), std::string::npos) << lastError();
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
        xcclCommAbort(comm);
      },
      90);
}

}  // namespace
