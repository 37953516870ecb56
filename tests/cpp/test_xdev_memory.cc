// xdev runtime: device memory (alignment, capacity accounting, out of memory), pinned host
// memory, pointer attributes, and the checks on copies, memsets and frees.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "test_xdev_util.h"

namespace {

using xdev_test::Gate;
using xdev_test::kCapacity;
using xdev_test::launch;

size_t freeBytes() {
  size_t f = 0, t = 0;
  EXPECT_EQ(xdevSuccess, xdevMemGetInfo(&f, &t));
  EXPECT_EQ(t, kCapacity);
  return f;
}

TEST(XdevMemory, AllocationsAreAlignedAndAccountedPerDevice) {
  XDEV_ASSERT_OK(xdevSetDevice(0));
  const size_t free0 = freeBytes();
  void* p = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(&p, 1000));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(freeBytes(), free0 - 1024) << "charged in 256-byte units";
  XDEV_ASSERT_OK(xdevSetDevice(1));
  const size_t free1 = freeBytes();
  void* q = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(&q, 4096));
  EXPECT_EQ(freeBytes(), free1 - 4096);
  XDEV_ASSERT_OK(xdevSetDevice(0));
  EXPECT_EQ(freeBytes(), free0 - 1024) << "device 1's allocation is not charged to device 0";
  XDEV_ASSERT_OK(xdevFree(q));  // freed from another current device: charged back to device 1
  XDEV_ASSERT_OK(xdevFree(p));
  EXPECT_EQ(freeBytes(), free0);
  XDEV_ASSERT_OK(xdevSetDevice(1));
  EXPECT_EQ(freeBytes(), free1);
  XDEV_ASSERT_OK(xdevSetDevice(0));
  // The memory is host-addressable.
  char* c = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&c), 3));
  c[0] = 'x';
  c[2] = 'z';
  EXPECT_EQ(c[0] + c[2], 'x' + 'z');
  XDEV_ASSERT_OK(xdevFree(c));
  void* zero = &zero;
  XDEV_ASSERT_OK(xdevMalloc(&zero, 0));
  EXPECT_EQ(zero, nullptr);
  XDEV_ASSERT_OK(xdevFree(nullptr));
}

TEST(XdevMemory, OutOfMemoryIsAnErrorAndTheProcessKeepsWorking) {
  XDEV_ASSERT_OK(xdevSetDevice(2));
  const size_t free0 = freeBytes();
  void* p = &p;
  EXPECT_EQ(xdevErrorMemoryAllocation, xdevMalloc(&p, kCapacity + 1));
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(xdevErrorMemoryAllocation, xdevGetLastError());
  EXPECT_NE(std::string(xdevGetLastErrorMessage()).find("out of memory"), std::string::npos)
      << xdevGetLastErrorMessage();
  EXPECT_EQ(xdevErrorMemoryAllocation, xdevMalloc(&p, SIZE_MAX)) << "no overflow in rounding";
  // Fill the device, fail, free one block, succeed.
  std::vector<void*> blocks;
  const size_t chunk = kCapacity / 4;
  for (int i = 0; i < 4; ++i) {
    void* b = nullptr;
    XDEV_ASSERT_OK(xdevMalloc(&b, chunk));
    blocks.push_back(b);
  }
  EXPECT_EQ(freeBytes(), 0u);
  EXPECT_EQ(xdevErrorMemoryAllocation, xdevMalloc(&p, 1));
  EXPECT_EQ(freeBytes(), 0u) << "a failed allocation charges nothing";
  XDEV_ASSERT_OK(xdevFree(blocks.back()));
  blocks.pop_back();
  XDEV_ASSERT_OK(xdevMalloc(&p, chunk));
  blocks.push_back(p);
  for (void* b : blocks) XDEV_ASSERT_OK(xdevFree(b));
  EXPECT_EQ(freeBytes(), free0);
  XDEV_ASSERT_OK(xdevSetDevice(0));
}

TEST(XdevMemory, PointerAttributes) {
  XDEV_ASSERT_OK(xdevSetDevice(3));
  char* dev = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&dev), 1000));
  char* host = nullptr;
  XDEV_ASSERT_OK(xdevHostAlloc(reinterpret_cast<void**>(&host), 500));
  XDEV_ASSERT_OK(xdevSetDevice(0));
  const size_t free0 = freeBytes();
  xdevPointerAttributes a;
  XDEV_ASSERT_OK(xdevPointerGetAttributes(&a, dev));
  EXPECT_EQ(a.type, xdevMemoryTypeDevice);
  EXPECT_EQ(a.device, 3);
  EXPECT_EQ(a.base, dev);
  EXPECT_EQ(a.size, 1000u);
  XDEV_ASSERT_OK(xdevPointerGetAttributes(&a, dev + 999));  // interior
  EXPECT_EQ(a.type, xdevMemoryTypeDevice);
  EXPECT_EQ(a.base, dev);
  XDEV_ASSERT_OK(xdevPointerGetAttributes(&a, dev + 1000));  // one past the end
  EXPECT_NE(a.base, dev);
  XDEV_ASSERT_OK(xdevPointerGetAttributes(&a, host + 10));
  EXPECT_EQ(a.type, xdevMemoryTypeHost);
  EXPECT_EQ(a.device, 3);
  EXPECT_EQ(a.base, host);
  EXPECT_EQ(a.size, 500u);
  int onStack = 0;
  XDEV_ASSERT_OK(xdevPointerGetAttributes(&a, &onStack));
  EXPECT_EQ(a.type, xdevMemoryTypeUnregistered);
  EXPECT_EQ(a.device, -1);
  EXPECT_EQ(a.base, nullptr);
  EXPECT_EQ(xdevErrorInvalidValue, xdevPointerGetAttributes(nullptr, dev));
  EXPECT_EQ(freeBytes(), free0) << "pinned host memory is not device memory";
  XDEV_ASSERT_OK(xdevFreeHost(host));
  XDEV_ASSERT_OK(xdevFree(dev));
  XDEV_ASSERT_OK(xdevPointerGetAttributes(&a, dev));
  EXPECT_EQ(a.type, xdevMemoryTypeUnregistered) << "freed memory leaves the registry";
}

TEST(XdevMemory, FreeRejectsWhatItDidNotAllocate) {
  char* dev = nullptr;
  void* host = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&dev), 512));
  XDEV_ASSERT_OK(xdevHostAlloc(&host, 64));
  int onStack = 0;
  EXPECT_EQ(xdevErrorInvalidDevicePointer, xdevFree(&onStack));
  EXPECT_EQ(xdevErrorInvalidDevicePointer, xdevFree(dev + 8)) << "interior pointer";
  EXPECT_EQ(xdevErrorInvalidDevicePointer, xdevFree(host)) << "pinned host memory";
  EXPECT_EQ(xdevErrorInvalidValue, xdevFreeHost(dev));
  XDEV_ASSERT_OK(xdevFree(dev));
  EXPECT_EQ(xdevErrorInvalidDevicePointer, xdevFree(dev)) << "double free";
  XDEV_ASSERT_OK(xdevFreeHost(host));
  EXPECT_EQ(xdevErrorInvalidValue, xdevFreeHost(host));
  XDEV_ASSERT_OK(xdevFreeHost(nullptr));
  EXPECT_EQ(xdevErrorInvalidValue, xdevMalloc(nullptr, 8));
  EXPECT_EQ(xdevErrorInvalidValue, xdevHostAlloc(nullptr, 8));
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemGetInfo(nullptr, nullptr));
}

TEST(XdevMemory, FreeWaitsForQueuedWorkThatMayUseTheBuffer) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  char* dev = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&dev), 1 << 20));
  std::atomic<bool> done{false};
  XDEV_ASSERT_OK(launch(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }));
  XDEV_ASSERT_OK(xdevMemsetAsync(dev, 3, 1 << 20, s));
  XDEV_ASSERT_OK(launch(s, [&] { done = true; }));
  XDEV_ASSERT_OK(xdevFree(dev));
  EXPECT_TRUE(done) << "xdevFree returned while work on the buffer was still queued";
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevMemory, CopiesCheckTheirKindAndBounds) {
  char* dev = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&dev), 100));
  char host[200] = {};
  // Sides that are not what the kind says.
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemcpy(host, host + 100, 10, xdevMemcpyHostToDevice));
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemcpy(dev, host, 10, xdevMemcpyDeviceToHost));
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemcpy(dev, host, 10, xdevMemcpyHostToHost));
  // Out of the allocation, and host ranges overlapping device memory.
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemcpy(dev + 50, host, 51, xdevMemcpyHostToDevice));
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemcpy(host, dev + 1, 100, xdevMemcpyDeviceToHost));
  XDEV_EXPECT_OK(xdevMemcpy(host, dev, 10, xdevMemcpyDefault)) << "Default infers the sides";
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemcpy(host, dev + 95, 10, xdevMemcpyDefault));
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemcpy(nullptr, host, 1, xdevMemcpyHostToHost));
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemcpy(host, host + 100, 1, static_cast<xdevMemcpyKind>(9)));
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemsetAsync(host, 0, 10, nullptr));
  EXPECT_EQ(xdevErrorInvalidValue, xdevMemsetAsync(dev, 0, 101, nullptr));
  XDEV_EXPECT_OK(xdevMemcpy(nullptr, nullptr, 0, xdevMemcpyDeviceToDevice)) << "0 bytes";
  // Round trip through device memory with the synchronous copy and Default kind.
  for (int i = 0; i < 100; ++i) host[i] = static_cast<char>(i * 3);
  XDEV_ASSERT_OK(xdevMemcpy(dev, host, 100, xdevMemcpyHostToDevice));
  XDEV_ASSERT_OK(xdevMemsetAsync(dev, 9, 10, nullptr));
  XDEV_ASSERT_OK(xdevMemcpy(host + 100, dev, 100, xdevMemcpyDefault));
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(host[100 + i], i < 10 ? 9 : static_cast<char>(i * 3)) << i;
  }
  XDEV_ASSERT_OK(xdevFree(dev));
}

TEST(XdevMemory, SynchronousCopyWaitsForTheDefaultStreamOnly) {
  char* dev = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&dev), 4));
  // Queued on the default stream before it: the copy sees the memset.
  XDEV_ASSERT_OK(
      launch(nullptr, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }));
  XDEV_ASSERT_OK(xdevMemsetAsync(dev, 5, 4, nullptr));
  char out[4] = {};
  XDEV_ASSERT_OK(xdevMemcpy(out, dev, 4, xdevMemcpyDeviceToHost));
  EXPECT_EQ(out[3], 5);
  // A blocked non-default stream does not hold it up.
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  Gate gate;
  XDEV_ASSERT_OK(gate.blockStream(s));
  XDEV_ASSERT_OK(xdevMemcpy(out, dev, 4, xdevMemcpyDeviceToHost));
  gate.open();
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
  XDEV_ASSERT_OK(xdevFree(dev));
}

}  // namespace
