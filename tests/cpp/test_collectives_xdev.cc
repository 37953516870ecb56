// Collectives on xdev communicators are ordered on the caller's xdev stream, as NCCL's are on
// CUDA streams: a collective starts after the work queued on its stream before it, work
// queued after it waits for it, and the enqueuing thread never blocks on the stream.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "xccl.h"
#include "xdev_runtime.h"

namespace {

using xccl_test::check;

void xcheck(xdevError_t e, const char* what) {
  ASSERT_EQ(e, xdevSuccess) << what << ": " << xdevGetLastErrorMessage();
}

// A new stream and a device buffer of `count` floats set to 1 (copied on that stream).
void streamWithOnes(size_t count, xdevStream_t* stream, float** buf) {
  xcheck(xdevStreamCreate(stream), "xdevStreamCreate");
  xcheck(xdevMalloc(reinterpret_cast<void**>(buf), count * sizeof(float)), "xdevMalloc");
  std::vector<float> in(count, 1.0f);
  xcheck(xdevMemcpyAsync(*buf, in.data(), count * sizeof(float), xdevMemcpyHostToDevice, *stream),
         "xdevMemcpyAsync");
  xcheck(xdevStreamSynchronize(*stream), "xdevStreamSynchronize");  // `in` ends here
}

// Runs fn(rank, comm) on n thread-ranks, rank r on xdev:r.
void runXdevWorld(int n, const std::function<void(int, xcclComm_t)>& fn) {
  xccl_test::MemoryStore store;
  xccl_test::runThreads(
      n,
      [&](int rank) {
        xcheck(xdevSetDevice(rank), "xdevSetDevice");
        xcclConfig_t cfg{};
        cfg.device = rank;
        cfg.deviceType = xcclDeviceXdev;
        cfg.timeout_ms = 30000;
        xcclComm_t comm = nullptr;
        check(xcclCommInitRankStore(&comm, n, rank, store.c(), "xdev/", &cfg), nullptr);
        fn(rank, comm);
        check(xcclCommDestroy(comm), nullptr);
      },
      60);
}

struct Slow {
  std::atomic<bool>* release;
  float* buf;
  size_t count;
  float value;
  bool released = false;
};

// A "kernel" that waits until the host says go (at most 5 s), then writes its value.
void slowFill(void* p) {
  auto* s = static_cast<Slow*>(p);
  for (int i = 0; i < 5000 && !s->release->load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  s->released = s->release->load();
  for (size_t i = 0; i < s->count; ++i) s->buf[i] = s->value;
}

TEST(XdevStreams, CollectiveWaitsForEarlierWorkAndLaterWorkWaitsForIt) {
  for (size_t count : {size_t(1), size_t(1000), size_t(1) << 20}) {
    SCOPED_TRACE(count);
    runXdevWorld(3, [&](int rank, xcclComm_t comm) {
      xdevStream_t stream = nullptr;
      xcheck(xdevStreamCreate(&stream), "xdevStreamCreate");
      float* buf = nullptr;
      xcheck(xdevMalloc(reinterpret_cast<void**>(&buf), count * sizeof(float)), "xdevMalloc");
      std::atomic<bool> release{false};
      Slow slow{&release, buf, count, float(rank + 1)};
      // 1. the input is produced on the stream, late, and only after the host says go
      xcheck(xdevLaunchHostFunc(stream, slowFill, &slow), "xdevLaunchHostFunc");
      // 2. the collective is enqueued behind it: this call must return without waiting
      check(xcclAllReduce(buf, buf, count, xcclFloat32, xcclSum, comm, stream), comm);
      release.store(true);
      // 3. a copy queued after the collective sees its result
      std::vector<float> host(count, -1.0f);
      xcheck(
          xdevMemcpyAsync(host.data(), buf, count * sizeof(float), xdevMemcpyDeviceToHost, stream),
          "xdevMemcpyAsync");
      xcheck(xdevStreamSynchronize(stream), "xdevStreamSynchronize");
      EXPECT_TRUE(slow.released) << "xcclAllReduce blocked the host until the stream was idle";
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(host[i], 6.0f) << "rank " << rank << " i " << i;
      xcheck(xdevFree(buf), "xdevFree");
      xcheck(xdevStreamDestroy(stream), "xdevStreamDestroy");
    });
  }
}

TEST(XdevStreams, DefaultStreamAndGroupsAreOrderedToo) {
  runXdevWorld(2, [&](int rank, xcclComm_t comm) {
    const size_t count = 4096;
    float *a = nullptr, *b = nullptr;
    xcheck(xdevMalloc(reinterpret_cast<void**>(&a), count * sizeof(float)), "xdevMalloc");
    xcheck(xdevMalloc(reinterpret_cast<void**>(&b), 2 * count * sizeof(float)), "xdevMalloc");
    std::vector<float> ones(count, float(rank + 1));
    // NULL is the communicator's device's default stream.
    xcheck(xdevMemcpyAsync(a, ones.data(), count * sizeof(float), xdevMemcpyHostToDevice, nullptr),
           "xdevMemcpyAsync");
    check(xcclGroupStart(), comm);
    check(xcclAllReduce(a, a, count, xcclFloat32, xcclMax, comm, nullptr), comm);
    check(xcclAllGather(a, b, count, xcclFloat32, comm, nullptr), comm);
    check(xcclGroupEnd(), comm);
    std::vector<float> out(2 * count);
    xcheck(
        xdevMemcpyAsync(out.data(), b, out.size() * sizeof(float), xdevMemcpyDeviceToHost, nullptr),
        "xdevMemcpyAsync");
    xcheck(xdevStreamSynchronize(nullptr), "xdevStreamSynchronize");
    for (float v : out) ASSERT_EQ(v, 2.0f);
    xdevFree(a);
    xdevFree(b);
  });
}

TEST(XdevStreams, AStreamOfAnotherDeviceIsRefused) {
  runXdevWorld(2, [&](int rank, xcclComm_t comm) {
    xdevStream_t other = nullptr;
    xcheck(xdevSetDevice(1 - rank), "xdevSetDevice");
    xcheck(xdevStreamCreate(&other), "xdevStreamCreate");
    xcheck(xdevSetDevice(rank), "xdevSetDevice");
    float x = 1;
    EXPECT_EQ(xcclAllReduce(&x, &x, 1, xcclFloat32, xcclSum, comm, other), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("belongs to xdev:"), std::string::npos)
        << xcclGetLastError(nullptr);
    xdevStreamDestroy(other);
    // The refused call left the communicator healthy.
    xcclResult_t async = xcclSuccess;
    check(xcclCommGetAsyncError(comm, &async), comm);
    EXPECT_EQ(async, xcclSuccess);
  });
}

// Never a wrong answer: a collective that fails (here its peer aborts instead of joining)
// fails the caller's stream where the collective stands. The copy queued behind it does not
// run, synchronising reports the failure with the operation's number, an event recorded
// before the collective is unaffected, and the device runs again once its errors are cleared.
TEST(XdevStreams, AFailedCollectiveFailsItsStreamAndNothingBehindItRuns) {
  xccl_test::MemoryStore store;
  xccl_test::runThreads(
      2,
      [&](int rank) {
        xcheck(xdevSetDevice(rank), "xdevSetDevice");
        xcclConfig_t cfg{};
        cfg.device = rank;
        cfg.deviceType = xcclDeviceXdev;
        cfg.timeout_ms = 20000;
        xcclComm_t comm = nullptr;
        check(xcclCommInitRankStore(&comm, 2, rank, store.c(), "xdev-fail/", &cfg), nullptr);
        if (rank == 1) {  // the peer that goes away
          check(xcclCommAbort(comm), nullptr);
          return;
        }
        xdevStream_t stream = nullptr;
        const size_t count = 1 << 16;
        float* buf = nullptr;
        streamWithOnes(count, &stream, &buf);
        xdevEvent_t before = nullptr;
        xcheck(xdevEventCreateWithFlags(&before, xdevEventDisableTiming), "xdevEventCreate");
        xcheck(xdevEventRecord(before, stream), "xdevEventRecord");
        // Enqueued (it may also be refused at once if the abort is already known).
        xcclResult_t r = xcclAllReduce(buf, buf, count, xcclFloat32, xcclSum, comm, stream);
        std::vector<float> out(count, -7.0f);
        xdevError_t copy =
            xdevMemcpyAsync(out.data(), buf, count * sizeof(float), xdevMemcpyDeviceToHost, stream);
        if (r == xcclSuccess) {
          // The copy was queued before or after the failure reached the stream.
          EXPECT_TRUE(copy == xdevSuccess || copy == xdevErrorStreamFailed) << copy;
          EXPECT_EQ(xdevStreamSynchronize(stream), xdevErrorStreamFailed)
              << "a failed allreduce let its stream go on";
          std::string why = xdevGetLastErrorMessage();
          EXPECT_NE(why.find("xccl operation #1 failed"), std::string::npos) << why;
          EXPECT_EQ(out[0], -7.0f) << "the copy behind the failed collective ran";
          EXPECT_EQ(out[count - 1], -7.0f);
          xcheck(xdevEventSynchronize(before), "xdevEventSynchronize (recorded before)");
        }
        xcclResult_t async = xcclSuccess;
        check(xcclCommGetAsyncError(comm, &async), comm);
        EXPECT_NE(async, xcclSuccess);
        check(xcclCommAbort(comm), nullptr);
        xcheck(xdevDeviceClearErrors(), "xdevDeviceClearErrors");
        xcheck(
            xdevMemcpyAsync(out.data(), buf, count * sizeof(float), xdevMemcpyDeviceToHost, stream),
            "xdevMemcpyAsync after clearing");
        xcheck(xdevStreamSynchronize(stream), "xdevStreamSynchronize after clearing");
        EXPECT_EQ(out[0], 1.0f);  // the input, untouched by the failed collective
        xdevEventDestroy(before);
        xcheck(xdevFree(buf), "xdevFree");
        xcheck(xdevStreamDestroy(stream), "xdevStreamDestroy");
      },
      60);
}

// xcclStreamErrorsReport (NCCL's behaviour, for torchft): the failed collective is reported,
// its stream goes on, and the communicator itself still refuses new work.
TEST(XdevStreams, ReportModeLetsTheStreamGoOnAndReportsTheFailure) {
  xccl_test::MemoryStore store;
  std::atomic<bool> enqueued{false};
  xccl_test::runThreads(
      2,
      [&](int rank) {
        xcheck(xdevSetDevice(rank), "xdevSetDevice");
        xcclConfig_t cfg{};
        cfg.device = rank;
        cfg.deviceType = xcclDeviceXdev;
        cfg.timeout_ms = 20000;
        cfg.streamErrors = xcclStreamErrorsReport;
        xcclComm_t comm = nullptr;
        check(xcclCommInitRankStore(&comm, 2, rank, store.c(), "xdev-report/", &cfg), nullptr);
        if (rank == 1) {  // goes away once rank 0's allreduce is on its stream
          for (int i = 0; i < 5000 && !enqueued.load(); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          check(xcclCommAbort(comm), nullptr);
          return;
        }
        xdevStream_t stream = nullptr;
        const size_t count = 1 << 16;
        float* buf = nullptr;
        streamWithOnes(count, &stream, &buf);
        EXPECT_EQ(xcclSuccess, xcclAllReduce(buf, buf, count, xcclFloat32, xcclSum, comm, stream));
        enqueued = true;
        std::vector<float> out(count, -7.0f);
        xcheck(
            xdevMemcpyAsync(out.data(), buf, count * sizeof(float), xdevMemcpyDeviceToHost, stream),
            "xdevMemcpyAsync behind the collective");
        xcheck(xdevStreamSynchronize(stream), "a reported failure must not fail the stream");
        EXPECT_NE(out[0], -7.0f) << "the copy behind the failed collective did not run";
        xcclResult_t async = xcclSuccess;
        check(xcclCommGetAsyncError(comm, &async), comm);
        EXPECT_NE(async, xcclSuccess) << "the failure was not reported";
        EXPECT_NE(xcclSuccess, xcclAllReduce(buf, buf, count, xcclFloat32, xcclSum, comm, stream))
            << "a failed communicator took new work";
        check(xcclCommAbort(comm), nullptr);
        xcheck(xdevStreamSynchronize(stream), "the stream after the communicator's abort");
        xcheck(xdevFree(buf), "xdevFree");
        xcheck(xdevStreamDestroy(stream), "xdevStreamDestroy");
      },
      60);
}

TEST(XdevStreams, AnUnknownStreamErrorsModeIsRefused) {
  xccl_test::MemoryStore store;
  xcclConfig_t cfg{};
  cfg.deviceType = xcclDeviceXdev;
  cfg.device = 0;
  cfg.streamErrors = static_cast<xcclStreamErrors_t>(7);
  xcclComm_t comm = nullptr;
  EXPECT_EQ(xcclInvalidArgument, xcclCommInitRankStore(&comm, 1, 0, store.c(), "bad/", &cfg));
  EXPECT_EQ(comm, nullptr);
}

TEST(XdevStreams, HostCommunicatorsRefuseStreams) {
  xccl_test::MemoryStore store;
  xcclComm_t comm = nullptr;
  check(xcclCommInitRankStore(&comm, 1, 0, store.c(), "host/", nullptr), nullptr);
  xdevStream_t s = nullptr;
  xcheck(xdevStreamCreate(&s), "xdevStreamCreate");
  float x = 1;
  EXPECT_EQ(xcclAllReduce(&x, &x, 1, xcclFloat32, xcclSum, comm, s), xcclInvalidArgument);
  xdevStreamDestroy(s);
  check(xcclCommDestroy(comm), nullptr);
}

}  // namespace

namespace {

// xcclCommInitAllConfig with deviceType xdev: one thread makes three ranks on xdev:0..2 and
// drives all of them on their own streams (enqueueing never blocks), then waits on the streams.
TEST(XdevStreams, InitAllConfigMakesStreamOrderedRanksOneThreadDrives) {
  const int n = 3;
  xcclConfig_t cfg{};
  cfg.deviceType = xcclDeviceXdev;
  cfg.timeout_ms = 30000;
  std::vector<xcclComm_t> comms(n, nullptr);
  check(xcclCommInitAllConfig(comms.data(), n, nullptr, &cfg), nullptr);
  std::vector<xdevStream_t> streams(n);
  std::vector<float*> bufs(n);
  const size_t count = 4096;
  for (int r = 0; r < n; ++r) {
    xcheck(xdevSetDevice(r), "xdevSetDevice");
    xcheck(xdevStreamCreate(&streams[r]), "xdevStreamCreate");
    xcheck(xdevMalloc(reinterpret_cast<void**>(&bufs[r]), count * sizeof(float)), "xdevMalloc");
    std::vector<float> host(count, float(r + 1));
    xcheck(xdevMemcpyAsync(bufs[r], host.data(), count * sizeof(float), xdevMemcpyHostToDevice,
                           streams[r]),
           "xdevMemcpyAsync");
    xcheck(xdevStreamSynchronize(streams[r]), "xdevStreamSynchronize");
  }
  for (int r = 0; r < n; ++r) {
    check(xcclAllReduce(bufs[r], bufs[r], count, xcclFloat32, xcclSum, comms[r], streams[r]),
          comms[r]);
  }
  for (int r = 0; r < n; ++r) {
    std::vector<float> out(count, 0.0f);
    xcheck(xdevSetDevice(r), "xdevSetDevice");
    xcheck(xdevMemcpyAsync(out.data(), bufs[r], count * sizeof(float), xdevMemcpyDeviceToHost,
                           streams[r]),
           "xdevMemcpyAsync");  // queued behind the collective's hold
    xcheck(xdevStreamSynchronize(streams[r]), "xdevStreamSynchronize");
    EXPECT_EQ(out[0], 6.0f);
    EXPECT_EQ(out[count - 1], 6.0f);
    xcheck(xdevFree(bufs[r]), "xdevFree");
    xcheck(xdevStreamDestroy(streams[r]), "xdevStreamDestroy");
  }
  for (xcclComm_t c : comms) check(xcclCommDestroy(c), nullptr);
  xcheck(xdevSetDevice(0), "xdevSetDevice");
}

}  // namespace
