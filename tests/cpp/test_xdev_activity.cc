// libxdev activity records (xdevActivityEnable / xdevActivityRead): what torch_xccl's Kineto
// plugin turns into device rows of a torch.profiler trace. Each kind of work is recorded with
// its own span on its stream, the span of a hold covers the time the stream waited at it, the
// enqueuing thread's external id rides along, and nothing is recorded while disabled.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "test_xdev_util.h"

namespace {

using xdev_test::launch;
using namespace std::chrono_literals;

std::vector<xdevActivityRecord> drain() {
  std::vector<xdevActivityRecord> out(1024);
  size_t n = 0;
  unsigned long long dropped = 0;
  EXPECT_EQ(xdevSuccess, xdevActivityRead(out.data(), out.size(), &n, &dropped));
  EXPECT_EQ(dropped, 0u);
  out.resize(n);
  return out;
}

const xdevActivityRecord* find(const std::vector<xdevActivityRecord>& rs, const char* name) {
  for (const auto& r : rs) {
    if (std::string(r.name) == name) return &r;
  }
  return nullptr;
}

TEST(XdevActivity, EveryKindOfWorkIsRecordedWithItsSpanStreamAndExternalId) {
  drain();
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  unsigned long long sid = 0;
  XDEV_ASSERT_OK(xdevStreamGetId(s, &sid));
  void* d = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(&d, 4096));
  std::vector<char> h(4096, 1);
  // Disabled: nothing recorded.
  XDEV_ASSERT_OK(xdevMemcpyAsync(d, h.data(), 4096, xdevMemcpyHostToDevice, s));
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  EXPECT_TRUE(drain().empty());

  XDEV_ASSERT_OK(xdevActivityEnable(1));
  XDEV_ASSERT_OK(xdevActivityPushExternalId(77));
  XDEV_ASSERT_OK(xdevMemcpyAsync(d, h.data(), 4096, xdevMemcpyHostToDevice, s));
  XDEV_ASSERT_OK(xdevMemsetAsync(d, 0, 100, s));
  XDEV_ASSERT_OK(xdevActivityPopExternalId());
  XDEV_ASSERT_OK(launch(s, [] { std::this_thread::sleep_for(30ms); }));
  XDEV_ASSERT_OK(xdevReduceAsync(d, d, d, 16, xdevFloat32, xdevSum, s));
  XDEV_ASSERT_OK(xdevMemcpyAsync(h.data(), d, 64, xdevMemcpyDeviceToHost, s));
  // A hold the stream reaches at once and waits at for ~50 ms.
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHoldNamed(s, &hold, "xccl allreduce"));
  std::this_thread::sleep_for(50ms);
  XDEV_ASSERT_OK(xdevHoldRelease(hold));
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  XDEV_ASSERT_OK(xdevActivityEnable(0));
  XDEV_ASSERT_OK(xdevMemsetAsync(d, 0, 100, s));  // disabled again: not recorded
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));

  const auto rs = drain();
  ASSERT_EQ(rs.size(), 6u);
  const auto* up = find(rs, "Memcpy HtoD");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->kind, xdevActivityMemcpy);
  EXPECT_EQ(up->bytes, 4096u);
  EXPECT_EQ(up->externalId, 77u);
  EXPECT_EQ(up->stream, sid);
  EXPECT_EQ(up->device, 0);
  ASSERT_NE(find(rs, "Memset"), nullptr);
  EXPECT_EQ(find(rs, "Memset")->externalId, 77u);
  const auto* fn = find(rs, "host function");
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(fn->externalId, 0u);
  EXPECT_GE(fn->endNs - fn->startNs, 25'000'000);  // the 30 ms sleep
  ASSERT_NE(find(rs, "reduce"), nullptr);
  EXPECT_EQ(find(rs, "reduce")->kind, xdevActivityKernel);
  ASSERT_NE(find(rs, "Memcpy DtoH"), nullptr);
  const auto* held = find(rs, "xccl allreduce");
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->kind, xdevActivityHold);
  EXPECT_GE(held->endNs - held->startNs, 40'000'000);
  // In stream order, and in the Unix epoch's nanoseconds (after 2020).
  for (size_t i = 1; i < rs.size(); ++i) EXPECT_LE(rs[i - 1].endNs, rs[i].startNs + 1000);
  EXPECT_GT(rs[0].startNs, 1'577'836'800'000'000'000LL);
  xdevFree(d);
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevActivity, AHoldReleasedBeforeTheStreamGotThereIsNotAWait) {
  drain();
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  XDEV_ASSERT_OK(xdevActivityEnable(1));
  XDEV_ASSERT_OK(launch(s, [] { std::this_thread::sleep_for(40ms); }));
  xdevHold_t hold = nullptr;
  XDEV_ASSERT_OK(xdevStreamHoldNamed(s, &hold, "early"));
  XDEV_ASSERT_OK(xdevHoldRelease(hold));  // while the host function still runs
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  XDEV_ASSERT_OK(xdevActivityEnable(0));
  const auto rs = drain();
  EXPECT_EQ(find(rs, "early"), nullptr);
  EXPECT_NE(find(rs, "host function"), nullptr);
  EXPECT_EQ(xdevErrorInvalidValue, xdevActivityPopExternalId());  // nothing pushed
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

}  // namespace
