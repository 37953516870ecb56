#include "XdevAllocator.h"

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "XdevException.h"
#include "XdevFunctions.h"
#include "XdevStream.h"

namespace xdev_torch {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kRound = 512;           // every block is a multiple of this
constexpr size_t kSmallLimit = 1 << 20;  // "small pool" for the statistics
constexpr size_t kReuseSlack = 2;        // a cached block may be at most 2x the request

struct Block {
  void* ptr = nullptr;
  size_t size = 0;       // bytes reserved (rounded)
  size_t requested = 0;  // bytes asked for
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;      // allocation stream: reuse without waiting only there
  std::set<c10::StreamId> uses;  // other streams it was recorded on
  int pendingEvents = 0;
};

void addStat(Stat& s, int64_t delta) {
  s.current += delta;
  if (delta > 0) {
    s.allocated += delta;
  } else {
    s.freed += -delta;
  }
  if (s.current > s.peak) {
    s.peak = s.current;
  }
}

void addStatArray(c10::CachingAllocator::StatArray& a, size_t size, int64_t delta) {
  addStat(a[static_cast<size_t>(StatType::AGGREGATE)], delta);
  addStat(a[static_cast<size_t>(size <= kSmallLimit ? StatType::SMALL_POOL : StatType::LARGE_POOL)],
          delta);
}

class DeviceCache {
 public:
  explicit DeviceCache(c10::DeviceIndex device) : device_(device) {}

  Block* malloc(size_t nbytes, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mu_);
    processEvents();
    const size_t size = (nbytes + kRound - 1) / kRound * kRound;
    Block* block = takeCached(size, stream);
    if (block == nullptr) {
      block = fresh(size, stream);
    }
    block->requested = nbytes;
    active_[block->ptr] = block;
    addStatArray(stats_.allocation, block->size, 1);
    addStatArray(stats_.active, block->size, 1);
    addStatArray(stats_.allocated_bytes, block->size, static_cast<int64_t>(block->size));
    addStatArray(stats_.active_bytes, block->size, static_cast<int64_t>(block->size));
    addStatArray(stats_.requested_bytes, block->size, static_cast<int64_t>(nbytes));
    return block;
  }

  void free(Block* block) {
    std::lock_guard<std::mutex> lock(mu_);
    active_.erase(block->ptr);
    addStatArray(stats_.allocation, block->size, -1);
    addStatArray(stats_.allocated_bytes, block->size, -static_cast<int64_t>(block->size));
    addStatArray(stats_.requested_bytes, block->size, -static_cast<int64_t>(block->requested));
    if (block->uses.empty()) {
      release(block);
      return;
    }
    // Used on other streams: reusable once the work queued there so far has completed.
    for (c10::StreamId id : block->uses) {
      xdevEvent_t ev = takeEvent();
      const c10::Stream s(c10::Stream::UNSAFE, c10::Device(kXdev, device_), id);
      DeviceSwitch guard(device_);
      XDEV_CHECK(xdevEventRecord(ev, nativeStream(s)));
      pending_.emplace_back(ev, block);
      block->pendingEvents++;
    }
    block->uses.clear();
  }

  void recordStream(void* ptr, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = active_.find(ptr);
    TORCH_CHECK(it != active_.end(), "xdev record_stream: pointer is not an active allocation");
    if (stream != it->second->stream) {
      it->second->uses.insert(stream);
    }
  }

  void emptyCache() {
    std::lock_guard<std::mutex> lock(mu_);
    processEvents();
    releaseCached();
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    processEvents();
    return stats_;
  }

  void resetAccumulated() {
    std::lock_guard<std::mutex> lock(mu_);
    forEachStat([](c10::CachingAllocator::Stat& s) {
      s.allocated = 0;
      s.freed = 0;
    });
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

  void resetPeak() {
    std::lock_guard<std::mutex> lock(mu_);
    forEachStat([](c10::CachingAllocator::Stat& s) { s.peak = s.current; });
  }

 private:
  // fn(stat) for every stat of every StatArray (caller holds mu_).
  template <typename Fn>
  void forEachStat(Fn&& fn) {
    for (auto* a : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.allocated_bytes,
                    &stats_.reserved_bytes, &stats_.active_bytes, &stats_.requested_bytes}) {
      for (auto& s : *a) fn(s);
    }
  }

  using Key = std::pair<c10::StreamId, size_t>;

  Block* takeCached(size_t size, c10::StreamId stream) {
    auto it = free_.lower_bound(Key(stream, size));
    if (it == free_.end() || it->first.first != stream || it->first.second > size * kReuseSlack) {
      return nullptr;
    }
    Block* block = it->second;
    free_.erase(it);
    return block;
  }

  Block* fresh(size_t size, c10::StreamId stream) {
    DeviceSwitch guard(device_);
    void* ptr = nullptr;
    xdevError_t err = xdevMalloc(&ptr, size);
    if (err == xdevErrorMemoryAllocation) {
      (void)xdevGetLastError();
      stats_.num_alloc_retries++;
      releaseCached();
      err = xdevMalloc(&ptr, size);
    }
    if (err == xdevErrorMemoryAllocation) {
      (void)xdevGetLastError();
      stats_.num_ooms++;
      size_t freeBytes = 0, total = 0;
      (void)xdevMemGetInfo(&freeBytes, &total);
      const size_t a = static_cast<size_t>(StatType::AGGREGATE);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "xdev out of memory. Tried to allocate ", size,
                       " bytes on xdev:", static_cast<int>(device_), ". The device has ", total,
                       " bytes in total (XCCL_XDEV_MEMORY), ", freeBytes,
                       " free; this process has ", stats_.allocated_bytes[a].current,
                       " bytes allocated by torch and ", stats_.reserved_bytes[a].current,
                       " bytes reserved by the caching allocator.");
    }
    XDEV_CHECK(err);
    auto* block = new Block();
    block->ptr = ptr;
    block->size = size;
    block->device = device_;
    block->stream = stream;
    stats_.num_device_alloc++;
    addStatArray(stats_.segment, size, 1);
    addStatArray(stats_.reserved_bytes, size, static_cast<int64_t>(size));
    return block;
  }

  // The block is no longer in use by anyone: back to the free list of its stream.
  void release(Block* block) {
    addStatArray(stats_.active, block->size, -1);
    addStatArray(stats_.active_bytes, block->size, -static_cast<int64_t>(block->size));
    free_.emplace(Key(block->stream, block->size), block);
  }

  void releaseCached() {
    DeviceSwitch guard(device_);
    for (auto& [key, block] : free_) {
      XDEV_WARN(xdevFree(block->ptr));
      stats_.num_device_free++;
      addStatArray(stats_.segment, block->size, -1);
      addStatArray(stats_.reserved_bytes, block->size, -static_cast<int64_t>(block->size));
      delete block;
    }
    free_.clear();
  }

  void processEvents() {
    while (!pending_.empty()) {
      auto [ev, block] = pending_.front();
      const xdevError_t err = xdevEventQuery(ev);
      if (err == xdevErrorNotReady) {
        break;  // events complete roughly in order; check the rest next time
      }
      XDEV_WARN(err);
      pending_.pop_front();
      events_.push_back(ev);
      if (--block->pendingEvents == 0) {
        release(block);
      }
    }
  }

  xdevEvent_t takeEvent() {
    if (!events_.empty()) {
      xdevEvent_t ev = events_.back();
      events_.pop_back();
      return ev;
    }
    DeviceSwitch guard(device_);
    xdevEvent_t ev = nullptr;
    XDEV_CHECK(xdevEventCreateWithFlags(&ev, xdevEventDisableTiming));
    return ev;
  }

  const c10::DeviceIndex device_;
  std::mutex mu_;
  std::multimap<Key, Block*> free_;
  std::unordered_map<void*, Block*> active_;
  std::deque<std::pair<xdevEvent_t, Block*>> pending_;
  std::vector<xdevEvent_t> events_;
  DeviceStats stats_;
};

DeviceCache& cacheFor(c10::DeviceIndex device) {
  static std::vector<std::unique_ptr<DeviceCache>> caches = [] {
    std::vector<std::unique_ptr<DeviceCache>> v;
    for (c10::DeviceIndex d = 0; d < deviceCount(); ++d) {
      v.push_back(std::make_unique<DeviceCache>(d));
    }
    return v;
  }();
  checkDeviceIndex(device);
  return *caches[device];
}

void deleteBlock(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  if (block != nullptr) {
    cacheFor(block->device).free(block);
  }
}

}  // namespace

c10::DataPtr XdevDeviceAllocator::allocate(size_t nbytes) {
  claimAccelerator();  // the first xdev tensor makes xdev this process's accelerator
  const c10::DeviceIndex device = currentDevice();
  if (nbytes == 0) {
    return c10::DataPtr(nullptr, nullptr, &deleteBlock, c10::Device(kXdev, device));
  }
  const c10::StreamId stream = currentStream(device).id();
  Block* block = cacheFor(device).malloc(nbytes, stream);
  return c10::DataPtr(block->ptr, block, &deleteBlock, c10::Device(kXdev, device));
}

c10::DeleterFnPtr XdevDeviceAllocator::raw_deleter() const { return nullptr; }

void XdevDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  XDEV_CHECK(xdevMemcpy(dest, src, count, xdevMemcpyDeviceToDevice));
}

void XdevDeviceAllocator::emptyCache(c10::MempoolId_t) {
  for (c10::DeviceIndex d = 0; d < deviceCount(); ++d) {
    cacheFor(d).emptyCache();
  }
}

void XdevDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr || !isXdevDataPtr(ptr)) {
    return;
  }
  auto* block = static_cast<Block*>(ptr.get_context());
  TORCH_CHECK(stream.device_type() == kXdev && stream.device_index() == block->device,
              "xdev record_stream: the tensor is on xdev:", static_cast<int>(block->device),
              " but the stream is on ", stream.device(),
              "; a tensor can only be recorded on a stream of its own device");
  cacheFor(block->device).recordStream(block->ptr, stream.id());
}

c10::CachingDeviceAllocator::DeviceStats XdevDeviceAllocator::getDeviceStats(
    c10::DeviceIndex device) {
  return cacheFor(resolveDevice(device)).stats();
}

void XdevDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  cacheFor(resolveDevice(device)).resetAccumulated();
}

void XdevDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  cacheFor(resolveDevice(device)).resetPeak();
}

std::pair<size_t, size_t> XdevDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  DeviceSwitch guard(resolveDevice(device));
  size_t freeBytes = 0, total = 0;
  XDEV_CHECK(xdevMemGetInfo(&freeBytes, &total));
  return {freeBytes, total};
}

bool isXdevDataPtr(const c10::DataPtr& ptr) { return ptr.get_deleter() == &deleteBlock; }

XdevDeviceAllocator* deviceAllocator() {
  static XdevDeviceAllocator allocator;
  return &allocator;
}

namespace {
// Registered at load: at::GetAllocator(kPrivateUse1) and torch.accelerator's memory API.
struct Registrar {
  Registrar() { c10::SetAllocator(kXdev, deviceAllocator()); }
} registrar;
}  // namespace

}  // namespace xdev_torch
