// C entry points: devices and device-wide synchronisation.
#include "runtime.h"
#include "status.h"

using xdev::api;
using xdev::Runtime;

namespace xdev {

xdevError_t waitAll(const std::vector<std::shared_ptr<Stream>>& streams, bool skipOwn,
                    std::string* why) {
  xdevError_t first = xdevSuccess;
  for (const auto& s : streams) {
    if (skipOwn && s.get() == Stream::current()) continue;
    const uint64_t tail = s->tail();
    s->waitFor(tail);
    if (first != xdevSuccess) continue;
    try {
      s->check(tail);
    } catch (const Failure& f) {
      first = f.code();
      if (why != nullptr) *why = f.what();
    }
  }
  return first;
}

}  // namespace xdev

extern "C" {

xdevError_t xdevGetDeviceCount(int* count) {
  return api("xdevGetDeviceCount", [&] {
    XDEV_REQUIRE(count != nullptr, xdevErrorInvalidValue, "count is NULL");
    *count = Runtime::get().deviceCount();
    return xdevSuccess;
  });
}

xdevError_t xdevSetDevice(int device) {
  return api("xdevSetDevice", [&] {
    Runtime::get().setCurrentDevice(device);
    return xdevSuccess;
  });
}

xdevError_t xdevGetDevice(int* device) {
  return api("xdevGetDevice", [&] {
    XDEV_REQUIRE(device != nullptr, xdevErrorInvalidValue, "device is NULL");
    *device = Runtime::get().currentDevice();
    return xdevSuccess;
  });
}

xdevError_t xdevDeviceSynchronize(void) {
  return api("xdevDeviceSynchronize", [&] {
    Runtime& rt = Runtime::get();
    std::string why;
    xdevError_t e = xdev::waitAll(rt.streams(rt.currentDevice()), false, &why);
    XDEV_REQUIRE(e == xdevSuccess, e, why);
    return xdevSuccess;
  });
}

xdevError_t xdevDeviceClearErrors(void) {
  return api("xdevDeviceClearErrors", [&] {
    Runtime& rt = Runtime::get();
    for (const auto& s : rt.streams(rt.currentDevice())) s->clearErrors();
    return xdevSuccess;
  });
}

xdevError_t xdevDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  return api("xdevDeviceGetStreamPriorityRange", [&] {
    if (leastPriority != nullptr) *leastPriority = xdev::kLeastPriority;
    if (greatestPriority != nullptr) *greatestPriority = xdev::kGreatestPriority;
    return xdevSuccess;
  });
}

}  // extern "C"
