// Operations staged through host memory (XCCL_XDEV_STAGING=1 here; the CUDA device's default,
// docs/CUDA.md "Staging"): the progress thread waits for the stream to copy the inputs in by
// polling host memory, so xcclCommAbort ends that wait even when the stream never gets there.
// The conformance of staged collectives is ctest's xccl_tests_conformance_xdev_staged_*.
// Runs only with XCCL_XDEV_STAGING=1 (read when the process first makes an xdev device):
// ctest's collectives_staged_abort entry sets it; the discovered copy skips.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "test_util.h"
#include "xccl.h"
#include "xdev_runtime.h"

namespace {

using xccl_test::check;

bool staged() {
  const char* v = std::getenv("XCCL_XDEV_STAGING");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

TEST(StagedXdev, AbortEndsAWaitForAStreamThatNeverGetsThere) {
  if (!staged()) GTEST_SKIP() << "needs XCCL_XDEV_STAGING=1 from the start (ctest sets it)";
  xccl_test::MemoryStore store;
  xccl_test::runThreads(
      2,
      [&](int rank) {
        ASSERT_EQ(xdevSetDevice(rank), xdevSuccess);
        xcclConfig_t cfg{};
        cfg.device = rank;
        cfg.deviceType = xcclDeviceXdev;
        cfg.timeout_ms = 30000;
        xcclComm_t comm = nullptr;
        check(xcclCommInitRankStore(&comm, 2, rank, store.c(), "staged-abort/", &cfg), nullptr);
        xdevStream_t stream = nullptr;
        ASSERT_EQ(xdevStreamCreate(&stream), xdevSuccess);
        const size_t count = 1024;
        float* buf = nullptr;
        ASSERT_EQ(xdevMalloc(reinterpret_cast<void**>(&buf), count * sizeof(float)), xdevSuccess);
        // A staged allreduce first: it completes, in place, with the right sum.
        std::vector<float> in(count, static_cast<float>(rank + 1)), out(count, 0.0f);
        ASSERT_EQ(
            xdevMemcpyAsync(buf, in.data(), count * sizeof(float), xdevMemcpyHostToDevice, stream),
            xdevSuccess);
        check(xcclAllReduce(buf, buf, count, xcclFloat32, xcclSum, comm, stream), comm);
        ASSERT_EQ(
            xdevMemcpyAsync(out.data(), buf, count * sizeof(float), xdevMemcpyDeviceToHost, stream),
            xdevSuccess);
        ASSERT_EQ(xdevStreamSynchronize(stream), xdevSuccess);
        EXPECT_EQ(out[0], 3.0f);
        EXPECT_EQ(out[count - 1], 3.0f);
        // Then the stream is stuck before the next one: the inputs are never copied in.
        xdevHold_t stuck = nullptr;
        ASSERT_EQ(xdevStreamHold(stream, &stuck), xdevSuccess);
        check(xcclAllReduce(buf, buf, count, xcclFloat32, xcclSum, comm, stream), comm);
        const auto t0 = std::chrono::steady_clock::now();
        xcclCommAbort(comm);  // must not wait for the stream
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_LT(s, 5.0) << "rank " << rank << ": xcclCommAbort waited for a stuck stream";
        ASSERT_EQ(xdevHoldRelease(stuck), xdevSuccess);
        // The aborted operation failed its stream (nothing behind it may take its outputs).
        EXPECT_EQ(xdevStreamSynchronize(stream), xdevErrorStreamFailed);
        ASSERT_EQ(xdevDeviceClearErrors(), xdevSuccess);
        ASSERT_EQ(xdevFree(buf), xdevSuccess);
        ASSERT_EQ(xdevStreamDestroy(stream), xdevSuccess);
      },
      60);
}

}  // namespace
