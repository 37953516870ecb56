// A long wait says what it waits for: one WARN line every XCCL_WAIT_NOTICE_S seconds
// (default 10; 0 = never) while it lasts, e.g.
//   rank 0: still waiting after 20 s for key 'peer/3' in the store (is that rank running?)
// so an operator sees who is late instead of silence until the timeout, and never a flood.
#pragma once

#include <string>

#include "clock.h"

namespace xccl {

class WaitNotice {
 public:
  // `what` completes "still waiting after N s for ..."; `subsys` is a LogSubsys bit.
  WaitNotice(std::string what, unsigned subsys);
  // Call from the wait loop; logs when the next notice is due. Cheap otherwise.
  void tick();
  int notices() const { return notices_; }

 private:
  std::string what_;
  unsigned subsys_;
  int64_t intervalMs_;
  Clock::time_point start_, next_;
  int notices_ = 0;
};

}  // namespace xccl
