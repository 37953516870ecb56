// Activity records (xdevActivityEnable / xdevActivityRead, xdev_runtime.h): what a stream ran
// and when, for profilers. Off by default; while off, streams pay one relaxed atomic load per
// task.
#pragma once

#include <cstdint>

#include "xdev_runtime.h"

namespace xdev::activity {

bool enabled();
int64_t nowNs();        // Unix epoch, ns (the clock torch's profiler uses)
uint64_t externalId();  // the calling thread's innermost pushed id (0: none)
void record(const char* name, int kind, int device, uint64_t stream, int64_t startNs, int64_t endNs,
            uint64_t externalId, uint64_t bytes);

// What a queued task says about itself when recording is on (name null: not recorded).
struct Label {
  const char* name = nullptr;  // a string literal
  int kind = 0;
  uint64_t bytes = 0;
  uint64_t externalId = 0;  // filled in at enqueue
};

}  // namespace xdev::activity
