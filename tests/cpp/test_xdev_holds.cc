// libxdev holds (xdevStreamHold / xdevHoldRelease) and the worker-free waits between streams
// built on them: what the collectives rely on for "work after a collective waits for it".
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "test_xdev_util.h"

namespace {

using xdev_test::Gate;
using xdev_test::launch;
using namespace std::chrono_literals;

TEST(XdevHold, WorkAfterAHoldWaitsForItsRelease) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHold(s, &hold));
  std::atomic<bool> ran{false};
  XDEV_ASSERT_OK(launch(s, [&] { ran = true; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(xdevErrorNotReady, xdevStreamQuery(s));
  XDEV_ASSERT_OK(xdevHoldRelease(hold));
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  EXPECT_TRUE(ran.load());
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevHold, ReleaseFromAnotherThreadWakesAHostWaitingOnTheStream) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHold(s, &hold));
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreate(&e));
  XDEV_ASSERT_OK(xdevEventRecord(e, s));  // behind the hold
  EXPECT_EQ(xdevErrorNotReady, xdevEventQuery(e));
  std::thread releaser([&] {
    std::this_thread::sleep_for(30ms);
    xdevHoldRelease(hold);
  });
  XDEV_EXPECT_OK(xdevEventSynchronize(e));
  releaser.join();
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevHold, AHoldReleasedWhileATaskBeforeItRunsCountsAfterThatTask) {
  // Positions stay in order: a released hold behind a running task is not "reached" first.
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  Gate g;
  XDEV_ASSERT_OK(g.blockStream(s));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHold(s, &hold));
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreate(&e));
  XDEV_ASSERT_OK(xdevEventRecord(e, s));
  XDEV_ASSERT_OK(xdevHoldRelease(hold));
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(xdevErrorNotReady, xdevEventQuery(e));  // the blocked task is still first
  g.open();
  XDEV_EXPECT_OK(xdevEventSynchronize(e));
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevHold, AWaitBetweenStreamsFollowsAHoldAcrossAChain) {
  // a: hold. b waits for a, c waits for b, then a task on c. Releasing a's hold must run the
  // task; before that nothing on b or c may be reached.
  xdevStream_t a, b, c;
  XDEV_ASSERT_OK(xdevStreamCreate(&a));
  XDEV_ASSERT_OK(xdevStreamCreate(&b));
  XDEV_ASSERT_OK(xdevStreamCreate(&c));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHold(a, &hold));
  xdevEvent_t ea, eb;
  XDEV_ASSERT_OK(xdevEventCreate(&ea));
  XDEV_ASSERT_OK(xdevEventCreate(&eb));
  XDEV_ASSERT_OK(xdevEventRecord(ea, a));
  XDEV_ASSERT_OK(xdevStreamWaitEvent(b, ea, 0));
  XDEV_ASSERT_OK(xdevEventRecord(eb, b));
  XDEV_ASSERT_OK(xdevStreamWaitEvent(c, eb, 0));
  std::atomic<bool> ran{false};
  XDEV_ASSERT_OK(launch(c, [&] { ran = true; }));
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(xdevErrorNotReady, xdevStreamQuery(b));
  XDEV_ASSERT_OK(xdevHoldRelease(hold));
  XDEV_ASSERT_OK(xdevStreamSynchronize(c));
  EXPECT_TRUE(ran.load());
  XDEV_EXPECT_OK(xdevStreamQuery(b));
  XDEV_ASSERT_OK(xdevEventDestroy(ea));
  XDEV_ASSERT_OK(xdevEventDestroy(eb));
  for (xdevStream_t s : {a, b, c}) XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevHold, AWaitOnAStreamThatIsAlreadyPastIsFree) {
  xdevStream_t a, b;
  XDEV_ASSERT_OK(xdevStreamCreate(&a));
  XDEV_ASSERT_OK(xdevStreamCreate(&b));
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreate(&e));
  XDEV_ASSERT_OK(launch(a, [] {}));
  XDEV_ASSERT_OK(xdevEventRecord(e, a));
  XDEV_ASSERT_OK(xdevStreamSynchronize(a));
  XDEV_ASSERT_OK(xdevStreamWaitEvent(b, e, 0));
  XDEV_EXPECT_OK(xdevStreamQuery(b));  // nothing queued on b
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevStreamDestroy(a));
  XDEV_ASSERT_OK(xdevStreamDestroy(b));
}

TEST(XdevHold, NullArgumentsAreErrors) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  EXPECT_EQ(xdevErrorInvalidValue, xdevStreamHold(s, nullptr));
  EXPECT_EQ(xdevErrorInvalidValue, xdevHoldRelease(nullptr));
  EXPECT_EQ(xdevErrorInvalidValue, xdevHoldFail(nullptr, "x"));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

// ---- failed holds: a failure travels with the data (docs/XDEV.md, "Failed holds")

bool says(const char* what) {
  return std::string(xdevGetLastErrorMessage()).find(what) != std::string::npos;
}

TEST(XdevFailedHold, TheStreamFailsFromTheHoldOnAndWorkBehindItDoesNotRun) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  std::atomic<int> before{0}, after{0};
  XDEV_ASSERT_OK(launch(s, [&] { before = 1; }));
  xdevEvent_t early, late;
  XDEV_ASSERT_OK(xdevEventCreate(&early));
  XDEV_ASSERT_OK(xdevEventCreate(&late));
  XDEV_ASSERT_OK(xdevEventRecord(early, s));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHold(s, &hold));
  XDEV_ASSERT_OK(launch(s, [&] { after = 1; }));  // a kernel that reads the held output
  XDEV_ASSERT_OK(xdevEventRecord(late, s));
  XDEV_ASSERT_OK(xdevHoldFail(hold, "allreduce #7: connection to rank 2 lost"));
  EXPECT_EQ(xdevErrorStreamFailed, xdevStreamSynchronize(s));
  EXPECT_TRUE(says("connection to rank 2 lost")) << xdevGetLastErrorMessage();
  EXPECT_EQ(1, before.load());
  EXPECT_EQ(0, after.load()) << "work queued behind a failed hold ran";
  XDEV_EXPECT_OK(xdevEventSynchronize(early));  // recorded before the hold: unaffected
  XDEV_EXPECT_OK(xdevEventQuery(early));
  EXPECT_EQ(xdevErrorStreamFailed, xdevEventSynchronize(late));
  EXPECT_EQ(xdevErrorStreamFailed, xdevEventQuery(late));
  EXPECT_EQ(xdevErrorStreamFailed, xdevStreamQuery(s));
  // Sticky: new work is refused at once, as a launch after a device fault is.
  EXPECT_EQ(xdevErrorStreamFailed, launch(s, [&] { after = 2; }));
  void* d = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(&d, 64));
  char host[64] = {0};
  EXPECT_EQ(xdevErrorStreamFailed, xdevMemcpyAsync(host, d, 64, xdevMemcpyDeviceToHost, s));
  EXPECT_EQ(xdevErrorStreamFailed, xdevDeviceSynchronize());
  EXPECT_TRUE(says("connection to rank 2 lost")) << xdevGetLastErrorMessage();
  EXPECT_EQ(0, after.load());
  XDEV_EXPECT_OK(xdevFree(d));  // freeing still works on a failed device
  XDEV_ASSERT_OK(xdevDeviceClearErrors());
  XDEV_ASSERT_OK(xdevEventDestroy(early));
  XDEV_ASSERT_OK(xdevEventDestroy(late));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevFailedHold, TheFailureTravelsToStreamsThatWaitOnItBeforeOrAfterItHappens) {
  // b waits on a's hold before the failure, c after it: both fail, with the message, and
  // neither runs the work queued behind its wait.
  xdevStream_t a, b, c;
  XDEV_ASSERT_OK(xdevStreamCreate(&a));
  XDEV_ASSERT_OK(xdevStreamCreate(&b));
  XDEV_ASSERT_OK(xdevStreamCreate(&c));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHold(a, &hold));
  xdevEvent_t ea;
  XDEV_ASSERT_OK(xdevEventCreate(&ea));
  XDEV_ASSERT_OK(xdevEventRecord(ea, a));
  XDEV_ASSERT_OK(xdevStreamWaitEvent(b, ea, 0));
  std::atomic<bool> ranB{false}, ranC{false};
  XDEV_ASSERT_OK(launch(b, [&] { ranB = true; }));
  XDEV_ASSERT_OK(xdevHoldFail(hold, "broadcast #3 timed out"));
  XDEV_ASSERT_OK(xdevStreamWaitEvent(c, ea, 0));
  // Refused at once when c has reached its failed wait already, else queued and never run.
  xdevError_t queued = launch(c, [&] { ranC = true; });
  EXPECT_TRUE(queued == xdevSuccess || queued == xdevErrorStreamFailed) << queued;
  EXPECT_EQ(xdevErrorStreamFailed, xdevStreamSynchronize(b));
  EXPECT_TRUE(says("broadcast #3 timed out")) << xdevGetLastErrorMessage();
  EXPECT_EQ(xdevErrorStreamFailed, xdevStreamSynchronize(c));
  EXPECT_TRUE(says("broadcast #3 timed out")) << xdevGetLastErrorMessage();
  EXPECT_FALSE(ranB.load());
  EXPECT_FALSE(ranC.load());
  XDEV_ASSERT_OK(xdevDeviceClearErrors());
  XDEV_ASSERT_OK(xdevEventDestroy(ea));
  for (xdevStream_t s : {a, b, c}) XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevFailedHold, AFailureReleasedWhileATaskBeforeItRunsCountsAfterThatTask) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  Gate g;
  XDEV_ASSERT_OK(g.blockStream(s));  // a task before the hold, still running
  xdevEvent_t first;
  XDEV_ASSERT_OK(xdevEventCreate(&first));
  XDEV_ASSERT_OK(xdevEventRecord(first, s));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHold(s, &hold));
  std::atomic<bool> ran{false};
  XDEV_ASSERT_OK(launch(s, [&] { ran = true; }));
  XDEV_ASSERT_OK(xdevHoldFail(hold, "gather #2 aborted"));
  EXPECT_EQ(xdevErrorNotReady, xdevStreamQuery(s));  // the blocked task is still first
  g.open();
  XDEV_EXPECT_OK(xdevEventSynchronize(first));
  EXPECT_EQ(xdevErrorStreamFailed, xdevStreamSynchronize(s));
  EXPECT_FALSE(ran.load());
  XDEV_ASSERT_OK(xdevDeviceClearErrors());
  XDEV_ASSERT_OK(xdevEventDestroy(first));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevFailedHold, ClearingTheDeviceErrorsLetsItsStreamsRunAgain) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHold(s, &hold));
  XDEV_ASSERT_OK(xdevHoldFail(hold, "allgather #1: rank 1 desynchronised"));
  EXPECT_EQ(xdevErrorStreamFailed, xdevStreamSynchronize(s));
  XDEV_ASSERT_OK(xdevDeviceClearErrors());
  XDEV_EXPECT_OK(xdevStreamQuery(s));
  std::atomic<bool> ran{false};
  XDEV_ASSERT_OK(launch(s, [&] { ran = true; }));
  XDEV_EXPECT_OK(xdevStreamSynchronize(s));
  EXPECT_TRUE(ran.load());
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

}  // namespace
