// Deadlines and polite spinning for progress loops.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace xccl {

using Clock = std::chrono::steady_clock;

// Now on Clock, in nanoseconds since its epoch.
inline int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// A point in time after which a wait gives up with xccl::Timeout.
class Deadline {
 public:
  static Deadline after(int64_t ms) {
    Deadline d;
    d.at_ = ms < 0 ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(ms);
    d.ms_ = ms;
    return d;
  }
  static Deadline never() { return after(-1); }
  bool expired() const { return Clock::now() >= at_; }
  int64_t budgetMs() const { return ms_; }
  int64_t remainingMs() const {
    if (at_ == Clock::time_point::max()) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return left < 0 ? 0 : left;
  }

 private:
  Clock::time_point at_{};
  int64_t ms_ = -1;
};

// Backoff for a polling loop: spin a while, then yield, and only after a whole millisecond
// without progress sleep in short naps, so that ranks oversubscribing few cores still make
// progress and long waits do not burn a core. The nap threshold is time, not a count of
// polls: a yield with nothing else to run returns in well under a microsecond, and a
// count-based threshold let naps (inflated to ~70 us by timer slack) land inside active
// transfers. reset() after progress was made.
class Backoff {
 public:
  Backoff() = default;
  // yieldAtOnce: skip the spin and yield from the first idle poll (ranks outnumber the
  // cores: a spinning rank holds the core its peer needs; Open MPI's yield_when_idle).
  explicit Backoff(bool yieldAtOnce) : spinPolls_(yieldAtOnce ? 0 : 64) {}
  void idle();
  void reset() {
    n_ = 0;
    napping_ = false;
  }
  uint64_t count() const { return n_; }
  bool napping() const { return napping_; }

 private:
  uint64_t n_ = 0;
  uint64_t spinPolls_ = 64;
  bool napping_ = false;
  Clock::time_point idleSince_{};
};

}  // namespace xccl
