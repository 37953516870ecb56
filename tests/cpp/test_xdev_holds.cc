// libxdev holds (xdevStreamHold / xdevHoldRelease) and the worker-free waits between streams
// built on them: what the collectives rely on for "work after a collective waits for it".
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

}  // namespace
