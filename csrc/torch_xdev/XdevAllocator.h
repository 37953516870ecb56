// The caching device allocator of xdev (the role of CUDACachingAllocator).
//
// Memory comes from xdevMalloc and is cached after use: a freed block goes back to a free list
// keyed by (stream it was allocated on, size) and is handed out again only to an allocation on
// that same stream, so stream order alone makes the reuse safe. A block that was also used on
// other streams (tensor.record_stream(s)) is not reusable when freed: an event is recorded on
// each of those streams and the block waits, outside every free list, until all of them have
// completed. When xdevMalloc fails, the cache is released (xdevFree) and the allocation
// retried once; if it still fails, torch.OutOfMemoryError is raised and nothing else changes.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

namespace xdev_torch {

class XdevDeviceAllocator : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
};

XdevDeviceAllocator* deviceAllocator();

// True when `ptr` was made by the device allocator (its deleter is ours).
bool isXdevDataPtr(const c10::DataPtr& ptr);

}  // namespace xdev_torch
