#include "XdevHostAllocator.h"

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "XdevException.h"
#include "XdevFunctions.h"
#include "XdevStream.h"

namespace xdev_torch {
namespace {

struct HostState {
  std::mutex mu;
  std::unordered_map<void*, std::vector<xdevEvent_t>> inFlight;      // ptr -> events to wait for
  std::vector<std::pair<void*, std::vector<xdevEvent_t>>> deferred;  // freed while in flight
  at::HostStats stats;
};

HostState& state() {
  static HostState* s = new HostState();  // leaked: deleters may run at exit
  return *s;
}

bool allDone(const std::vector<xdevEvent_t>& events) {
  for (xdevEvent_t ev : events) {
    if (xdevEventQuery(ev) == xdevErrorNotReady) {
      return false;
    }
  }
  return true;
}

void destroyAll(std::vector<xdevEvent_t>& events) {
  for (xdevEvent_t ev : events) {
    XDEV_WARN(xdevEventDestroy(ev));
  }
  events.clear();
}

// Caller holds the lock.
void freeDeferredLocked(HostState& s) {
  for (size_t i = 0; i < s.deferred.size();) {
    if (allDone(s.deferred[i].second)) {
      destroyAll(s.deferred[i].second);
      XDEV_WARN(xdevFreeHost(s.deferred[i].first));
      s.deferred[i] = std::move(s.deferred.back());
      s.deferred.pop_back();
    } else {
      ++i;
    }
  }
}

void deleteHost(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  HostState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.inFlight.find(ptr);
  if (it != s.inFlight.end()) {
    std::vector<xdevEvent_t> events = std::move(it->second);
    s.inFlight.erase(it);
    if (!allDone(events)) {
      s.deferred.emplace_back(ptr, std::move(events));
      return;
    }
    destroyAll(events);
  }
  XDEV_WARN(xdevFreeHost(ptr));
  freeDeferredLocked(s);
}

struct XdevHostAllocator final : public at::HostAllocator {
  at::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      {
        std::lock_guard<std::mutex> lock(state().mu);
        freeDeferredLocked(state());
      }
      XDEV_CHECK(xdevHostAlloc(&ptr, nbytes));
    }
    return {ptr, ptr, &deleteHost, at::Device(at::kCPU)};
  }
  at::DeleterFnPtr raw_deleter() const override { return &deleteHost; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    recordHostUse(at::DataPtr(ptr, ctx, nullptr, at::Device(at::kCPU)), stream);
    return true;
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(state().mu);
    freeDeferredLocked(state());
  }
  at::HostStats get_stats() override { return at::HostStats(); }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

XdevHostAllocator gHostAllocator;

}  // namespace

at::HostAllocator* hostAllocator() { return &gHostAllocator; }

bool isPinned(const void* ptr) {
  if (ptr == nullptr) {
    return false;
  }
  xdevPointerAttributes attr{};
  if (xdevPointerGetAttributes(&attr, ptr) != xdevSuccess) {
    (void)xdevGetLastError();
    return false;
  }
  return attr.type == xdevMemoryTypeHost;
}

void recordHostUse(const at::DataPtr& ptr, const c10::Stream& stream) {
  void* base = ptr.get_context();
  if (base == nullptr || !isPinned(base)) {
    return;
  }
  xdevStream_t native = nativeStream(stream);
  DeviceSwitch guard(stream.device_index());
  xdevEvent_t ev = nullptr;
  XDEV_CHECK(xdevEventCreateWithFlags(&ev, xdevEventDisableTiming));
  XDEV_CHECK(xdevEventRecord(ev, native));
  HostState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto& events = s.inFlight[base];
  for (size_t i = 0; i < events.size();) {  // drop what has completed: the list stays short
    if (xdevEventQuery(events[i]) != xdevErrorNotReady) {
      XDEV_WARN(xdevEventDestroy(events[i]));
      events[i] = events.back();
      events.pop_back();
    } else {
      ++i;
    }
  }
  events.push_back(ev);
}

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &gHostAllocator);

}  // namespace xdev_torch
