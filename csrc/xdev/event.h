// An event: the latest position recorded in a stream, plus, for timing events, the time the
// stream's worker reached it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "stream.h"

namespace xdev {

using Clock = std::chrono::steady_clock;

class Event {
 public:
  // One record. Copies are what waits keep: re-recording the event does not change them.
  struct Mark {
    std::shared_ptr<Stream> stream;  // null: never recorded
    uint64_t pos = 0;
    std::shared_ptr<const Clock::time_point> when;  // timing events: set when pos is reached
    bool done() const { return !stream || stream->reached(pos); }
  };

  Event(int device, unsigned flags) : device_(device), flags_(flags) {}
  int device() const { return device_; }
  bool timing() const { return (flags_ & xdevEventDisableTiming) == 0; }

  // Captures all work queued on stream so far.
  void record(const std::shared_ptr<Stream>& stream);
  Mark mark();

 private:
  const int device_;
  const unsigned flags_;
  std::mutex mu_;
  Mark mark_;
};

}  // namespace xdev
