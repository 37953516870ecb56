// Backoff (clock.h): no state beyond the object's own.
#include <sched.h>

#include <time.h>
#include <algorithm>

#include "clock.h"

namespace xccl {

void Backoff::idle() {
  // Spin briefly (latency), then yield (the other core may be running our peer), then
  // nap (oversubscribed machines: ranks x progress threads > cores).
  ++n_;
  if (n_ < spinPolls_) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    return;
  }
  if (n_ == std::max<uint64_t>(spinPolls_, 1)) idleSince_ = Clock::now();
  if (!napping_) {
    // Until 1 ms without progress has passed: yield (the clock is read every 256 polls).
    if (n_ % 256 != 0 || Clock::now() - idleSince_ < std::chrono::milliseconds(1)) {
      sched_yield();
      return;
    }
    napping_ = true;
  }
  const bool longIdle = Clock::now() - idleSince_ > std::chrono::milliseconds(20);
  struct timespec ts = {0, longIdle ? 200000 : 20000};  // 20 us naps, 200 us after 20 ms
  nanosleep(&ts, nullptr);
}

}  // namespace xccl
