// Activity records: one process-wide buffer, taken under a mutex by the stream workers that
// finish a task (and the threads that open a hold), drained by xdevActivityRead.
#include "activity.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "common/param.h"
#include "status.h"

namespace xdev::activity {
namespace {

std::atomic<bool> gEnabled{false};

struct Buffer {
  std::mutex mu;
  std::deque<xdevActivityRecord> records;
  uint64_t dropped = 0;
  size_t capacity = 1000000;
};

// Records kept until read (docs/ENV.md).
XCCL_PARAM(XdevActivityCapacity, "XDEV_ACTIVITY_CAPACITY", 1000000, 1, 1LL << 32)

Buffer& buffer() {
  static Buffer* b = [] {
    auto* x = new Buffer();  // never destroyed: workers may record during exit
    x->capacity = static_cast<size_t>(xcclParamXdevActivityCapacity());
    return x;
  }();
  return *b;
}

thread_local std::vector<uint64_t> tlsIds;

}  // namespace

bool enabled() { return gEnabled.load(std::memory_order_relaxed); }

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t externalId() { return tlsIds.empty() ? 0 : tlsIds.back(); }

void record(const char* name, int kind, int device, uint64_t stream, int64_t startNs, int64_t endNs,
            uint64_t extId, uint64_t bytes) {
  xdevActivityRecord r{};
  std::strncpy(r.name, name != nullptr ? name : "", sizeof(r.name) - 1);
  r.kind = kind;
  r.device = device;
  r.stream = stream;
  r.startNs = startNs;
  r.endNs = std::max(endNs, startNs);
  r.externalId = extId;
  r.bytes = bytes;
  Buffer& b = buffer();
  std::lock_guard<std::mutex> g(b.mu);
  if (b.records.size() >= b.capacity) {
    ++b.dropped;
    return;
  }
  b.records.push_back(r);
}

}  // namespace xdev::activity

using xdev::api;

extern "C" {

xdevError_t xdevActivityEnable(int enable) {
  return api("xdevActivityEnable", [&] {
    xdev::activity::buffer();  // reads the capacity knob here, where a bad value is an error
    xdev::activity::gEnabled.store(enable != 0);
    return xdevSuccess;
  });
}

xdevError_t xdevActivityPushExternalId(unsigned long long id) {
  return api("xdevActivityPushExternalId", [&] {
    xdev::activity::tlsIds.push_back(id);
    return xdevSuccess;
  });
}

xdevError_t xdevActivityPopExternalId(void) {
  return api("xdevActivityPopExternalId", [&] {
    XDEV_REQUIRE(!xdev::activity::tlsIds.empty(), xdevErrorInvalidValue,
                 "no external id pushed on this thread");
    xdev::activity::tlsIds.pop_back();
    return xdevSuccess;
  });
}

xdevError_t xdevActivityRead(xdevActivityRecord* out, size_t capacity, size_t* count,
                             unsigned long long* dropped) {
  return api("xdevActivityRead", [&] {
    XDEV_REQUIRE(count != nullptr && (out != nullptr || capacity == 0), xdevErrorInvalidValue,
                 "out or count is NULL");
    auto& b = xdev::activity::buffer();
    std::lock_guard<std::mutex> g(b.mu);
    const size_t n = std::min(capacity, b.records.size());
    std::copy(b.records.begin(), b.records.begin() + n, out);
    b.records.erase(b.records.begin(), b.records.begin() + n);
    *count = n;
    if (dropped != nullptr) {
      *dropped = b.dropped;
      b.dropped = 0;
    }
    return xdevSuccess;
  });
}

}  // extern "C"
