// Non-blocking creation (xcclConfig_t.blocking = 0, XCCL_COMM_BLOCKING) and event timing
// (xcclEventElapsedTime): docs/ENV.md and the comments in xccl.h.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "collectives/bootstrap/bootstrap_internal.h"
#include "test_util.h"
#include "xccl.h"

namespace {

using xccl_test::MemoryStore;
using xccl_test::runThreads;
using xccl_test::ScopedEnv;
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

xcclConfig_t nonBlocking() {
  xcclConfig_t cfg = XCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return cfg;
}

// Polls xcclCommGetAsyncError until the creation is over (or `limitSec` passes).
xcclResult_t awaitCreation(xcclComm_t comm, double limitSec = 60) {
  const auto t0 = Clock::now();
  xcclResult_t state = xcclInProgress;
  while (secondsSince(t0) < limitSec) {
    EXPECT_EQ(xcclCommGetAsyncError(comm, &state), xcclSuccess);
    if (state != xcclInProgress) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return state;
}

// Rank 1 starts first and alone: its creation cannot finish until rank 0 comes 200 ms later.
// Meanwhile the call has returned, the handle answers "in progress", and an operation on it
// is refused; once both are ready an allreduce gives the sum.
TEST(NonBlockingInit, ReturnsInProgressAtOnceThenBecomesReadyAndRuns) {
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  runThreads(2, [&](int rank) {
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    xcclConfig_t cfg = nonBlocking();
    xcclComm_t comm = nullptr;
    const auto t0 = Clock::now();
    ASSERT_EQ(xcclCommInitRankConfig(&comm, 2, id, rank, &cfg), xcclInProgress);
    ASSERT_NE(comm, nullptr);
    EXPECT_LT(secondsSince(t0), 0.1) << "a non-blocking creation returned late";
    float x = 1.0F + static_cast<float>(rank);
    if (rank == 1) {
      xcclResult_t state = xcclSuccess;
      ASSERT_EQ(xcclCommGetAsyncError(comm, &state), xcclSuccess);
      EXPECT_EQ(state, xcclInProgress);
      EXPECT_EQ(xcclAllReduce(&x, &x, 1, xcclFloat32, xcclSum, comm, nullptr), xcclInvalidUsage);
      EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("still being created"),
                std::string::npos)
          << xcclGetLastError(nullptr);
    }
    ASSERT_EQ(awaitCreation(comm), xcclSuccess) << xcclGetLastError(comm);
    int n = 0;
    ASSERT_EQ(xcclCommCount(comm, &n), xcclSuccess);
    EXPECT_EQ(n, 2);
    ASSERT_EQ(xcclAllReduce(&x, &x, 1, xcclFloat32, xcclSum, comm, nullptr), xcclSuccess);
    xcclEvent_t ev;
    ASSERT_EQ(xcclEventRecord(&ev, comm), xcclSuccess);
    ASSERT_EQ(xcclEventWait(&ev, -1), xcclSuccess);
    EXPECT_EQ(x, 3.0F);
    EXPECT_EQ(xcclCommDestroy(comm), xcclSuccess);
  });
}

// A creation waiting (with the default 30-minute deadline) for a rank 0 that never comes:
// xcclCommAbort stops it within a fraction of a second.
TEST(NonBlockingInit, AbortStopsACreationWaitingForAnAbsentPeerAtOnce) {
  for (const bool viaStore : {true, false}) {
    SCOPED_TRACE(viaStore ? "xcclCommInitRankStore" : "xcclCommInitRankConfig");
    MemoryStore store;
    xcclUniqueId id;
    ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
    xcclConfig_t cfg = nonBlocking();
    xcclComm_t comm = nullptr;
    const xcclResult_t r = viaStore ? xcclCommInitRankStore(&comm, 2, 1, store.c(), "absent/", &cfg)
                                    : xcclCommInitRankConfig(&comm, 2, id, 1, &cfg);
    ASSERT_EQ(r, xcclInProgress) << xcclGetLastError(nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    xcclResult_t state = xcclSuccess;
    ASSERT_EQ(xcclCommGetAsyncError(comm, &state), xcclSuccess);
    EXPECT_EQ(state, xcclInProgress);
    const auto t0 = Clock::now();
    EXPECT_EQ(xcclCommAbort(comm), xcclSuccess);
    EXPECT_LT(secondsSince(t0), 1.0);
  }
}

// A creation that fails (its deadline passes without rank 0) reports its error through the
// handle: xcclCommGetAsyncError gives the code, xcclGetLastError(comm) the reason, and an
// operation is refused naming the failed creation.
TEST(NonBlockingInit, AFailedCreationReportsItsErrorThroughTheHandle) {
  ScopedEnv env("XCCL_TIMEOUT_MS", "300");
  MemoryStore store;
  xcclConfig_t cfg = nonBlocking();
  xcclComm_t comm = nullptr;
  ASSERT_EQ(xcclCommInitRankStore(&comm, 2, 1, store.c(), "lonely/", &cfg), xcclInProgress);
  EXPECT_EQ(awaitCreation(comm, 20), xcclTimeout);
  const std::string why = xcclGetLastError(comm);
  EXPECT_NE(why.find("secret"), std::string::npos) << why;
  float x = 0;
  EXPECT_EQ(xcclAllReduce(&x, &x, 1, xcclFloat32, xcclSum, comm, nullptr), xcclInvalidUsage);
  EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("creation failed"), std::string::npos)
      << xcclGetLastError(nullptr);
  EXPECT_EQ(xcclCommDestroy(comm), xcclSuccess);
}

// `blocking` is read only from configs made with XCCL_CONFIG_INITIALIZER: a zero-initialised
// config means blocking (what it always meant), unless XCCL_COMM_BLOCKING=0, which also turns
// NULL configs non-blocking. A value other than 0 or 1 is refused.
TEST(NonBlockingInit, BlockingFollowsTheInitializerOrXcclCommBlocking) {
  auto create = [](const xcclConfig_t* cfg) {
    xcclUniqueId id;
    EXPECT_EQ(xcclGetUniqueId(&id), xcclSuccess);
    xcclComm_t comm = nullptr;
    const xcclResult_t r = xcclCommInitRankConfig(&comm, 1, id, 0, cfg);
    if (comm != nullptr) {
      EXPECT_EQ(awaitCreation(comm), xcclSuccess);
      EXPECT_EQ(xcclCommDestroy(comm), xcclSuccess);
    }
    return r;
  };
  xcclConfig_t zeroed{};
  zeroed.blocking = 0;
  EXPECT_EQ(create(&zeroed), xcclSuccess);
  xcclConfig_t undef = XCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(create(&undef), xcclSuccess);
  xcclConfig_t nb = nonBlocking();
  EXPECT_EQ(create(&nb), xcclInProgress);
  xcclConfig_t bad = XCCL_CONFIG_INITIALIZER;
  bad.blocking = 2;
  EXPECT_EQ(create(&bad), xcclInvalidArgument);
  ScopedEnv env("XCCL_COMM_BLOCKING", "0");
  EXPECT_EQ(create(nullptr), xcclInProgress);
  EXPECT_EQ(create(&zeroed), xcclInProgress);
  xcclConfig_t blocking = XCCL_CONFIG_INITIALIZER;
  blocking.blocking = 1;
  EXPECT_EQ(create(&blocking), xcclSuccess);
}

// A config from an older header (XCCL_CONFIG_INITIALIZER wrote a smaller size) is read only
// as far as its size: a field beyond it is never looked at, even holding a value that would
// be refused; a size too small for the struct's first fields is refused.
TEST(ConfigSize, AConfigIsReadOnlyAsFarAsItsSize) {
  auto create = [](const xcclConfig_t& cfg) {
    xcclUniqueId id;
    EXPECT_EQ(xcclGetUniqueId(&id), xcclSuccess);
    xcclComm_t comm = nullptr;
    const xcclResult_t r = xcclCommInitRankConfig(&comm, 1, id, 0, &cfg);
    if (comm != nullptr) EXPECT_EQ(xcclCommDestroy(comm), xcclSuccess);
    return r;
  };
  xcclConfig_t older = XCCL_CONFIG_INITIALIZER;
  older.reproducible = 12345;
  EXPECT_EQ(create(older), xcclInvalidArgument);  // this header's size: read and refused
  older.size = offsetof(xcclConfig_t, reproducible);
  EXPECT_EQ(create(older), xcclSuccess) << xcclGetLastError(nullptr);
  xcclConfig_t tiny = XCCL_CONFIG_INITIALIZER;
  tiny.size = 3;
  EXPECT_EQ(create(tiny), xcclInvalidArgument);
  EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("config.size"), std::string::npos);
}

// xcclEventElapsedTime: an allreduce that waits 300 ms for its peer takes >= 0.25 s; one
// enqueued behind it, timed from an event recorded just before it, excludes that wait.
TEST(EventElapsedTime, TimesAnOperationFromItsStartNotFromTheQueueAhead) {
  MemoryStore store;
  runThreads(2, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, 2, rank);
    std::vector<float> a(16, 1.0F), b(16, 2.0F);
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    xcclEvent_t before, middle, after;
    XCCL_TEST_CHECK(xcclEventRecord(&before, comm));
    XCCL_TEST_CHECK(
        xcclAllReduce(a.data(), a.data(), a.size(), xcclFloat32, xcclSum, comm, nullptr));
    XCCL_TEST_CHECK(xcclEventRecord(&middle, comm));
    XCCL_TEST_CHECK(
        xcclAllReduce(b.data(), b.data(), b.size(), xcclFloat32, xcclSum, comm, nullptr));
    XCCL_TEST_CHECK(xcclEventRecord(&after, comm));
    float ms = -1;
    if (rank == 0) {  // still waiting for rank 1
      EXPECT_EQ(xcclEventElapsedTime(&ms, &before, &after), xcclInProgress);
    }
    XCCL_TEST_CHECK(xcclEventWait(&after, -1));
    ASSERT_EQ(xcclEventElapsedTime(&ms, &before, &middle), xcclSuccess);
    float second = -1;
    ASSERT_EQ(xcclEventElapsedTime(&second, &middle, &after), xcclSuccess);
    if (rank == 0) EXPECT_GE(ms, 250.0F);
    EXPECT_GE(second, 0.0F);
    EXPECT_LT(second, 100.0F) << "the second allreduce was charged the first one's wait";
    EXPECT_EQ(a[0], 2.0F);
    EXPECT_EQ(b[0], 4.0F);
    xcclEvent_t other = after;
    other.comm = nullptr;
    EXPECT_EQ(xcclEventElapsedTime(&ms, &before, &other), xcclInvalidUsage);
    EXPECT_EQ(xcclCommDestroy(comm), xcclSuccess);
  });
}

// xcclCommQueryProperties: 5 thread-ranks on two fake hosts (0, 1, 2 | 3, 4).
TEST(QueryProperties, SaysWhereEachRankIsAndWhatTheCommunicatorDoes) {
  MemoryStore store;
  runThreads(5, [&](int rank) {
    xccl::setThreadHostIdOverride(rank < 3 ? "props-host-a" : "props-host-b");
    xcclComm_t comm = xccl_test::initThreadComm(store, 5, rank);
    xccl::setThreadHostIdOverride("");
    xcclCommProperties_t p = XCCL_COMM_PROPERTIES_INITIALIZER;
    XCCL_TEST_CHECK(xcclCommQueryProperties(comm, &p));
    EXPECT_EQ(p.rank, rank);
    EXPECT_EQ(p.nRanks, 5);
    EXPECT_EQ(p.deviceType, xcclDeviceHost);
    EXPECT_EQ(p.nHosts, 2);
    EXPECT_EQ(p.localRank, rank < 3 ? rank : rank - 3);
    EXPECT_EQ(p.localRanks, rank < 3 ? 3 : 2);
    EXPECT_EQ(p.reproducible, 0);
    EXPECT_EQ(p.registeredInPlace, 1);
    EXPECT_EQ(p.windows, 1);
    EXPECT_GT(p.timeoutMs, 0);
    // A caller whose header stops before `nHosts` gets nothing past it.
    xcclCommProperties_t older = XCCL_COMM_PROPERTIES_INITIALIZER;
    older.size = offsetof(xcclCommProperties_t, nHosts);
    XCCL_TEST_CHECK(xcclCommQueryProperties(comm, &older));
    EXPECT_EQ(older.localRanks, rank < 3 ? 3 : 2);
    EXPECT_EQ(older.nHosts, 0);
    // A struct not made by the initializer is refused, naming it.
    xcclCommProperties_t raw{};
    EXPECT_EQ(xcclCommQueryProperties(comm, &raw), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(comm)).find("XCCL_COMM_PROPERTIES_INITIALIZER"),
              std::string::npos);
    EXPECT_EQ(xcclCommQueryProperties(comm, nullptr), xcclInvalidArgument);
    XCCL_TEST_CHECK(xcclCommDestroy(comm));
  });
}

}  // namespace
