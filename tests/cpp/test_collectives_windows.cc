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
#include <thread>
#include <vector>

#include "collectives/bootstrap/bootstrap_internal.h"
#include "test_util.h"
#include "xccl.h"
#include "xdev_runtime.h"

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

xcclComm_t initXdevProcessComm(const xcclUniqueId& id, int nranks, int rank) {
  EXPECT_EQ(xdevSetDevice(rank), xdevSuccess);
  xcclConfig_t cfg{};
  cfg.timeout_ms = 60000;
  cfg.device = rank;
  cfg.deviceType = xcclDeviceXdev;
  xcclComm_t comm = nullptr;
  check(xcclCommInitRankConfig(&comm, nranks, id, rank, &cfg));
  return comm;
}

// What a host function on an xdev stream does: sleep, then fill a device buffer (a kernel
// that runs late), or copy a window's contents out (work queued after a wait).
struct LateFill {
  float* dst;
  size_t count;
  float base;
};
void lateFill(void* arg) {
  auto* f = static_cast<LateFill*>(arg);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  for (size_t i = 0; i < f->count; ++i) f->dst[i] = f->base + float(i % 1021);
}
struct Snapshot {
  const float* src;
  std::vector<float>* out;
};
void snapshot(void* arg) {
  auto* s = static_cast<Snapshot*>(arg);
  s->out->assign(s->src, s->src + s->out->size());
}

// On xdev communicators puts and waits are operations on the caller's stream: a put copies
// what the stream's earlier (late) work wrote, and work queued after a wait sees the put's
// bytes. Without the ordering the put would copy zeros, or the snapshot would.
TEST(Windows, OnXdevPutsAndWaitsAreOrderedOnTheStream) {
  const int n = 3;
  const size_t count = 100003, rounds = 3;
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclComm_t comm = initXdevProcessComm(id, n, rank);
        const size_t bytes = count * rounds * sizeof(float);
        float* win = nullptr;
        float* src = nullptr;
        ASSERT_EQ(xdevMalloc(reinterpret_cast<void**>(&win), bytes), xdevSuccess)
            << xdevGetLastErrorMessage();
        ASSERT_EQ(xdevMalloc(reinterpret_cast<void**>(&src), count * sizeof(float)), xdevSuccess);
        std::memset(win, 0, bytes);
        std::memset(src, 0, count * sizeof(float));
        xcclWindow_t w = nullptr;
        check(xcclCommWindowRegister(comm, win, bytes, &w, 0), comm);
        xdevStream_t s = nullptr;
        ASSERT_EQ(xdevStreamCreate(&s), xdevSuccess);
        const int right = (rank + 1) % n, left = (rank + n - 1) % n;
        std::vector<LateFill> fills(rounds);
        std::vector<std::vector<float>> seen(rounds, std::vector<float>(count));
        std::vector<Snapshot> snaps(rounds);
        for (size_t r = 0; r < rounds; ++r) {
          fills[r] = {src, count, float(rank * 100000 + r * 10000)};
          ASSERT_EQ(xdevLaunchHostFunc(s, lateFill, &fills[r]), xdevSuccess);
          check(xcclPutSignal(src, count, xcclFloat32, right, w, r * count * sizeof(float), 2, 0, 0,
                              comm, s),
                comm);
          xcclWaitSignalDesc_t d{1, left, 2, 0};
          check(xcclWaitSignal(1, &d, comm, s), comm);
          snaps[r] = {win + r * count, &seen[r]};
          ASSERT_EQ(xdevLaunchHostFunc(s, snapshot, &snaps[r]), xdevSuccess);
        }
        // The calls returned at once; the stream does the work.
        ASSERT_EQ(xdevStreamSynchronize(s), xdevSuccess) << xdevGetLastErrorMessage();
        for (size_t r = 0; r < rounds; ++r) {
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(seen[r][i], float(left * 100000 + r * 10000) + float(i % 1021))
                << "rank " << rank << " round " << r << " element " << i;
          }
        }
        // XCCL_STREAM_CALLER is for host communicators.
        EXPECT_EQ(xcclSignal(right, 0, 0, 0, comm, XCCL_STREAM_CALLER), xcclInvalidArgument);
        check(xcclCommWindowDeregister(comm, w), comm);
        xdevStreamDestroy(s);
        xdevFree(src);
        xdevFree(win);
        check(xcclCommDestroy(comm));
      },
      120);
}

// On xdev, an awaited peer that exits fails the wait on the stream: the stream's error and
// the communicator's name the rank, well before the timeout.
TEST(Windows, OnXdevAWaitForAPeerThatExitedFailsTheStream) {
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  xccl_test::runProcesses(
      2,
      [&](int rank) {
        xcclComm_t comm = initXdevProcessComm(id, 2, rank);
        void* mem = nullptr;
        ASSERT_EQ(xdevMalloc(&mem, 4096), xdevSuccess);
        xcclWindow_t win = nullptr;
        check(xcclCommWindowRegister(comm, mem, 4096, &win, 0), comm);
        if (rank == 1) _exit(0);  // leaves without a signal
        const auto t0 = std::chrono::steady_clock::now();
        xcclWaitSignalDesc_t d{1, 1, 0, 0};
        ASSERT_EQ(xcclWaitSignal(1, &d, comm, nullptr), xcclSuccess);  // queued
        EXPECT_NE(xdevStreamSynchronize(nullptr), xdevSuccess);
        const std::string why = xdevGetLastErrorMessage();
        EXPECT_NE(why.find("rank 1 (pid"), std::string::npos) << why;
        EXPECT_NE(why.find("exited"), std::string::npos) << why;
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
        xcclResult_t async = xcclSuccess;
        xcclCommGetAsyncError(comm, &async);
        EXPECT_EQ(async, xcclRemoteError);
        xcclCommAbort(comm);
      },
      90);
}

}  // namespace
