// xdev runtime: devices, streams and events (ordering within and across streams, waits,
// queries, elapsed time, launch failures, destroy). Memory, kernels and threads have their own
// test_xdev_*.cc files; all of them run with the knobs set below.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test_xdev_util.h"

namespace {

// Before main, hence before the runtime's first call, which reads the knobs once.
const bool kKnobsSet = [] {
  setenv("XCCL_XDEV_COUNT", "4", 1);
  setenv("XCCL_XDEV_MEMORY", "64M", 1);
  return true;
}();

using xdev_test::Gate;
using xdev_test::kDevices;
using xdev_test::launch;

TEST(XdevDevice, CountComesFromTheKnobAndCurrentDeviceIsPerThread) {
  int n = 0;
  XDEV_ASSERT_OK(xdevGetDeviceCount(&n));
  EXPECT_EQ(n, kDevices);
  XDEV_ASSERT_OK(xdevSetDevice(2));
  int d = -1;
  XDEV_ASSERT_OK(xdevGetDevice(&d));
  EXPECT_EQ(d, 2);
  int other = -1;
  std::thread([&] { xdevGetDevice(&other); }).join();
  EXPECT_EQ(other, 0) << "a new thread starts on device 0";
  XDEV_ASSERT_OK(xdevSetDevice(0));
}

TEST(XdevDevice, BadOrdinalsAreErrorsAndSetTheLastError) {
  xdevGetLastError();
  EXPECT_EQ(xdevErrorInvalidDevice, xdevSetDevice(kDevices));
  EXPECT_EQ(xdevErrorInvalidDevice, xdevSetDevice(-1));
  EXPECT_NE(std::strstr(xdevGetLastErrorMessage(), "device -1"), nullptr)
      << xdevGetLastErrorMessage();
  EXPECT_EQ(xdevErrorInvalidDevice, xdevPeekAtLastError());
  EXPECT_EQ(xdevErrorInvalidDevice, xdevGetLastError());
  EXPECT_EQ(xdevSuccess, xdevGetLastError()) << "GetLastError clears it";
  int d = -1;
  XDEV_ASSERT_OK(xdevGetDevice(&d));
  EXPECT_EQ(d, 0) << "a failed SetDevice changes nothing";
  EXPECT_EQ(xdevErrorInvalidValue, xdevGetDeviceCount(nullptr));
  EXPECT_STREQ(xdevGetErrorName(xdevErrorNotReady), "xdevErrorNotReady");
  EXPECT_STREQ(xdevGetErrorString(xdevErrorMemoryAllocation), "out of memory");
}

TEST(XdevStream, ManyAsyncOperationsRunInIssueOrder) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  std::vector<int> order;  // touched only by the stream's worker until the sync
  for (int i = 0; i < 2000; ++i) XDEV_ASSERT_OK(launch(s, [&order, i] { order.push_back(i); }));
  // Copies chained through device buffers: each reads what the previous one wrote.
  const size_t n = 1 << 16;
  std::vector<char> a(n, 7), out(n, 0);
  char* buf[4];
  for (auto& b : buf) XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&b), n));
  XDEV_ASSERT_OK(xdevMemsetAsync(buf[0], 1, n, s));
  XDEV_ASSERT_OK(xdevMemcpyAsync(buf[0], a.data(), n / 2, xdevMemcpyHostToDevice, s));
  for (int i = 1; i < 4; ++i) {
    XDEV_ASSERT_OK(xdevMemcpyAsync(buf[i], buf[i - 1], n, xdevMemcpyDeviceToDevice, s));
  }
  XDEV_ASSERT_OK(xdevMemcpyAsync(out.data(), buf[3], n, xdevMemcpyDeviceToHost, s));
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  ASSERT_EQ(order.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(order[i], i);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], i < n / 2 ? 7 : 1) << i;
  for (auto& b : buf) XDEV_ASSERT_OK(xdevFree(b));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevStream, StreamsWithoutAWaitRunIndependently) {
  xdevStream_t a, b;
  XDEV_ASSERT_OK(xdevStreamCreate(&a));
  XDEV_ASSERT_OK(xdevStreamCreate(&b));
  xdevGetLastError();
  Gate gate;
  XDEV_ASSERT_OK(gate.blockStream(a));
  std::atomic<bool> ran{false};
  XDEV_ASSERT_OK(launch(b, [&] { ran = true; }));
  XDEV_ASSERT_OK(xdevStreamSynchronize(b));  // would hang if streams shared one queue
  EXPECT_TRUE(ran);
  EXPECT_EQ(xdevErrorNotReady, xdevStreamQuery(a));
  // The default stream does not synchronise with other streams either.
  XDEV_ASSERT_OK(launch(nullptr, [] {}));
  XDEV_ASSERT_OK(xdevStreamSynchronize(nullptr));
  EXPECT_EQ(xdevErrorNotReady, xdevStreamQuery(a));
  EXPECT_EQ(xdevSuccess, xdevPeekAtLastError()) << "NotReady is not recorded as an error";
  gate.open();
  XDEV_ASSERT_OK(xdevStreamSynchronize(a));
  EXPECT_EQ(xdevSuccess, xdevStreamQuery(a));
  XDEV_ASSERT_OK(xdevStreamDestroy(a));
  XDEV_ASSERT_OK(xdevStreamDestroy(b));
}

TEST(XdevStream, WaitEventOrdersAConsumerAfterAProducer) {
  // A: slow host function, then writes 42 into device memory; B waits on A's event, then
  // copies it out. Were the wait ignored, B would copy the old 0 while A still sleeps.
  xdevStream_t a, b;
  XDEV_ASSERT_OK(xdevStreamCreate(&a));
  XDEV_ASSERT_OK(xdevStreamCreate(&b));
  int* dev;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&dev), sizeof(int)));
  XDEV_ASSERT_OK(xdevMemsetAsync(dev, 0, sizeof(int), a));
  XDEV_ASSERT_OK(launch(a, [] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }));
  const int answer = 42;
  XDEV_ASSERT_OK(xdevMemcpyAsync(dev, &answer, sizeof(int), xdevMemcpyHostToDevice, a));
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreateWithFlags(&e, xdevEventDisableTiming));
  XDEV_ASSERT_OK(xdevEventRecord(e, a));
  XDEV_ASSERT_OK(xdevStreamWaitEvent(b, e, 0));
  int host = -1;
  XDEV_ASSERT_OK(xdevMemcpyAsync(&host, dev, sizeof(int), xdevMemcpyDeviceToHost, b));
  XDEV_ASSERT_OK(xdevStreamSynchronize(b));
  EXPECT_EQ(host, 42);
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevFree(dev));
  XDEV_ASSERT_OK(xdevStreamDestroy(a));
  XDEV_ASSERT_OK(xdevStreamDestroy(b));
}

TEST(XdevStream, AWaitKeepsTheRecordItSawWhenTheEventIsRecordedAgain) {
  xdevStream_t a, b;
  XDEV_ASSERT_OK(xdevStreamCreate(&a));
  XDEV_ASSERT_OK(xdevStreamCreate(&b));
  Gate first, second;
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreate(&e));
  XDEV_ASSERT_OK(first.blockStream(a));
  XDEV_ASSERT_OK(xdevEventRecord(e, a));
  XDEV_ASSERT_OK(xdevStreamWaitEvent(b, e, 0));  // waits for `first` only
  std::atomic<bool> bRan{false};
  XDEV_ASSERT_OK(launch(b, [&] { bRan = true; }));
  XDEV_ASSERT_OK(second.blockStream(a));
  XDEV_ASSERT_OK(xdevEventRecord(e, a));  // re-recorded behind `second`
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(bRan) << "B ran before the work it waits for";
  first.open();
  XDEV_ASSERT_OK(xdevStreamSynchronize(b));  // would hang if the wait followed the re-record
  EXPECT_TRUE(bRan);
  EXPECT_EQ(xdevErrorNotReady, xdevEventQuery(e)) << "queries follow the latest record";
  second.open();
  XDEV_ASSERT_OK(xdevEventSynchronize(e));
  EXPECT_EQ(xdevSuccess, xdevEventQuery(e));
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevStreamDestroy(a));
  XDEV_ASSERT_OK(xdevStreamDestroy(b));
}

TEST(XdevEvent, QueryAndSynchronizeFollowTheStream) {
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreate(&e));
  EXPECT_EQ(xdevSuccess, xdevEventQuery(e)) << "a never-recorded event is complete, as in CUDA";
  XDEV_ASSERT_OK(xdevEventSynchronize(e));
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  Gate gate;
  XDEV_ASSERT_OK(gate.blockStream(s));
  XDEV_ASSERT_OK(xdevEventRecord(e, s));
  EXPECT_EQ(xdevErrorNotReady, xdevEventQuery(e));
  std::atomic<bool> synced{false};
  std::thread waiter([&] {
    xdevEventSynchronize(e);
    synced = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(synced) << "EventSynchronize returned before the event's work was done";
  gate.open();
  waiter.join();
  EXPECT_TRUE(synced);
  EXPECT_EQ(xdevSuccess, xdevEventQuery(e));
  // Recorded on an idle stream: complete at once.
  XDEV_ASSERT_OK(xdevEventRecord(e, s));
  XDEV_ASSERT_OK(xdevEventSynchronize(e));
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevEvent, ElapsedTimeMeasuresTheWorkBetweenTwoRecords) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  xdevEvent_t start, end, untimed, unrecorded;
  XDEV_ASSERT_OK(xdevEventCreate(&start));
  XDEV_ASSERT_OK(xdevEventCreateWithFlags(&end, xdevEventDefault));
  XDEV_ASSERT_OK(xdevEventCreateWithFlags(&untimed, xdevEventDisableTiming));
  XDEV_ASSERT_OK(xdevEventCreate(&unrecorded));
  Gate gate;
  XDEV_ASSERT_OK(xdevEventRecord(start, s));
  XDEV_ASSERT_OK(gate.blockStream(s));
  XDEV_ASSERT_OK(launch(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }));
  XDEV_ASSERT_OK(xdevEventRecord(end, s));
  XDEV_ASSERT_OK(xdevEventRecord(untimed, s));
  float ms = -1;
  EXPECT_EQ(xdevErrorNotReady, xdevEventElapsedTime(&ms, start, end));
  gate.open();
  XDEV_ASSERT_OK(xdevEventSynchronize(end));
  XDEV_ASSERT_OK(xdevEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 29.0f);
  EXPECT_LT(ms, 60000.0f);
  XDEV_ASSERT_OK(xdevEventElapsedTime(&ms, end, end));
  EXPECT_EQ(ms, 0.0f);
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevEventElapsedTime(&ms, start, untimed));
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevEventElapsedTime(&ms, start, unrecorded));
  EXPECT_EQ(xdevErrorInvalidValue, xdevEventElapsedTime(nullptr, start, end));
  for (auto e : {start, end, untimed, unrecorded}) XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevEvent, RecordingOnAnotherDevicesStreamIsAnError) {
  XDEV_ASSERT_OK(xdevSetDevice(1));
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreate(&e));
  xdevStream_t s1;
  XDEV_ASSERT_OK(xdevStreamCreate(&s1));
  XDEV_ASSERT_OK(xdevSetDevice(0));
  xdevStream_t s0;
  XDEV_ASSERT_OK(xdevStreamCreate(&s0));
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevEventRecord(e, s0));
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevEventRecord(e, nullptr)) << "device 0's default";
  XDEV_EXPECT_OK(xdevEventRecord(e, s1));
  XDEV_EXPECT_OK(xdevStreamWaitEvent(s0, e, 0)) << "waiting across devices is allowed";
  XDEV_EXPECT_OK(xdevStreamSynchronize(s0));
  int dev = -1;
  XDEV_ASSERT_OK(xdevStreamGetDevice(s1, &dev));
  EXPECT_EQ(dev, 1);
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevStreamDestroy(s0));
  XDEV_ASSERT_OK(xdevStreamDestroy(s1));
}

TEST(XdevStream, AHostFunctionThatThrowsFailsItsStreamStickily) {
  xdevStream_t s, other;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  XDEV_ASSERT_OK(xdevStreamCreate(&other));
  XDEV_ASSERT_OK(launch(s, [] { throw std::runtime_error("kernel fault"); }));
  std::atomic<bool> later{false};
  XDEV_ASSERT_OK(launch(s, [&] {
    later = true;
    throw std::runtime_error("a second fault");
  }));
  EXPECT_EQ(xdevErrorLaunchFailure, xdevStreamSynchronize(s));
  // The message is the first thrown one's, so a caller learns what went wrong.
  EXPECT_NE(std::string(xdevGetLastErrorMessage()).find("host function threw: kernel fault"),
            std::string::npos)
      << xdevGetLastErrorMessage();
  EXPECT_TRUE(later) << "work queued after the failure still runs";
  EXPECT_EQ(xdevErrorLaunchFailure, xdevStreamQuery(s));
  EXPECT_EQ(xdevErrorLaunchFailure, xdevStreamSynchronize(s)) << "sticky";
  EXPECT_EQ(xdevErrorLaunchFailure, xdevGetLastError());
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreate(&e));
  XDEV_ASSERT_OK(xdevEventRecord(e, s));
  EXPECT_EQ(xdevErrorLaunchFailure, xdevEventSynchronize(e));
  XDEV_EXPECT_OK(xdevStreamSynchronize(other)) << "other streams are unaffected";
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
  XDEV_ASSERT_OK(xdevStreamDestroy(other));
}

TEST(XdevStream, DestroyDrainsQueuedWorkAndInvalidatesTheHandle) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) {
    XDEV_ASSERT_OK(launch(s, [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++done;
    }));
  }
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
  EXPECT_EQ(done, 20);
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevStreamQuery(s));
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevStreamDestroy(s));
  EXPECT_EQ(xdevErrorInvalidResourceHandle, launch(s, [] {}));
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevStreamDestroy(nullptr));
  // A made-up handle is detected, never dereferenced.
  auto bogus = reinterpret_cast<xdevStream_t>(uintptr_t{0x12345678});
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevStreamSynchronize(bogus));
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreate(&e));
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevEventQuery(e));
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevEventRecord(e, nullptr));
  EXPECT_EQ(xdevErrorInvalidResourceHandle, xdevEventDestroy(e));
}

TEST(XdevStream, IdsDevicesAndPriorities) {
  std::set<unsigned long long> ids;
  std::vector<xdevStream_t> streams(8);
  for (auto& s : streams) {
    XDEV_ASSERT_OK(xdevStreamCreate(&s));
    unsigned long long id = 0;
    XDEV_ASSERT_OK(xdevStreamGetId(s, &id));
    EXPECT_GT(id, 0u);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), streams.size());
  unsigned long long id = 99;
  XDEV_ASSERT_OK(xdevStreamGetId(nullptr, &id));
  EXPECT_EQ(id, 0u);
  for (auto s : streams) XDEV_ASSERT_OK(xdevStreamDestroy(s));
  xdevStream_t s;  // ids are not reused after a destroy
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  XDEV_ASSERT_OK(xdevStreamGetId(s, &id));
  EXPECT_EQ(ids.count(id), 0u);
  XDEV_ASSERT_OK(xdevStreamDestroy(s));

  int least = 7, greatest = 7, prio = 7;
  XDEV_ASSERT_OK(xdevDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_LE(greatest, least);
  XDEV_ASSERT_OK(xdevStreamCreateWithPriority(&s, 0, -100));
  XDEV_ASSERT_OK(xdevStreamGetPriority(s, &prio));
  EXPECT_EQ(prio, greatest) << "clamped into the range";
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
  EXPECT_EQ(xdevErrorInvalidValue, xdevStreamCreateWithPriority(&s, 0x80, 0));
  EXPECT_EQ(xdevErrorInvalidValue, xdevStreamCreate(nullptr));
  XDEV_ASSERT_OK(xdevStreamCreateWithFlags(&s, xdevStreamNonBlocking));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevStream, SynchronisingOwnStreamFromAHostFunctionIsAnErrorNotAHang) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  xdevError_t inside = xdevSuccess, destroyInside = xdevSuccess;
  XDEV_ASSERT_OK(launch(s, [&] {
    inside = xdevStreamSynchronize(s);
    destroyInside = xdevStreamDestroy(s);
  }));
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  EXPECT_EQ(inside, xdevErrorInvalidValue);
  EXPECT_EQ(destroyInside, xdevErrorInvalidValue);
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevDevice, DeviceSynchronizeWaitsForEveryStreamOfTheCurrentDevice) {
  std::vector<xdevStream_t> streams(3);
  std::atomic<int> done{0};
  for (auto& s : streams) {
    XDEV_ASSERT_OK(xdevStreamCreate(&s));
    XDEV_ASSERT_OK(launch(s, [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++done;
    }));
  }
  XDEV_ASSERT_OK(launch(nullptr, [&] { ++done; }));
  XDEV_ASSERT_OK(xdevDeviceSynchronize());
  EXPECT_EQ(done, 4);
  // Another device's blocked stream does not hold up this device's synchronize.
  XDEV_ASSERT_OK(xdevSetDevice(3));
  xdevStream_t blocked;
  XDEV_ASSERT_OK(xdevStreamCreate(&blocked));
  Gate gate;
  XDEV_ASSERT_OK(gate.blockStream(blocked));
  XDEV_ASSERT_OK(xdevSetDevice(0));
  XDEV_ASSERT_OK(xdevDeviceSynchronize());
  gate.open();
  XDEV_ASSERT_OK(xdevStreamDestroy(blocked));
  for (auto s : streams) XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

}  // namespace
