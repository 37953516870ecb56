// The process-wide state of the xdev runtime: devices (count and capacity from the knobs),
// each thread's current device, the memory, and the tables that turn stream and event
// handles into objects.
//
// Handles are not addresses: a handle is the object's id (one counter for streams and events,
// never reused), so a destroyed or made-up handle is detected, never dereferenced.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "event.h"
#include "memory.h"
#include "stream.h"

namespace xdev {

// Stream priorities: lower is more urgent, as in CUDA. Kept, not used for scheduling.
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -1;

// Waits for everything queued so far on each stream and returns the first sticky error.
// skipOwn: leave out the stream whose worker is the calling thread (else that is an error).
// Waits for every stream's queued work; returns the first stream's error (and its message in
// *why) without throwing.
xdevError_t waitAll(const std::vector<std::shared_ptr<Stream>>& streams, bool skipOwn,
                    std::string* why = nullptr);

class Runtime {
 public:
  // The runtime, created at the first call. Throws Failure for a malformed knob.
  static Runtime& get();

  int deviceCount() const { return static_cast<int>(defaultStreams_.size()); }
  // Throws Failure(xdevErrorInvalidDevice) unless 0 <= device < deviceCount().
  void checkDevice(int device) const;
  int currentDevice() const;
  void setCurrentDevice(int device);
  Memory& memory() { return memory_; }

  // NULL: the current device's default stream. Throws Failure(InvalidResourceHandle) for a
  // handle that is not a live stream.
  std::shared_ptr<Stream> stream(xdevStream_t handle);
  xdevStream_t createStream(int device, int priority);
  // Removes the handle; the caller drains the stream.
  std::shared_ptr<Stream> takeStream(xdevStream_t handle);
  // Every live stream of device (all devices for -1), default streams included.
  std::vector<std::shared_ptr<Stream>> streams(int device);

  std::shared_ptr<Event> event(xdevEvent_t handle);
  xdevEvent_t createEvent(int device, unsigned flags);
  std::shared_ptr<Event> takeEvent(xdevEvent_t handle);

  // Process exit: abandons every stream (stream.h).
  void shutdown();

 private:
  Runtime(int devices, size_t capacity);
  std::shared_ptr<Stream> defaultStream(int device);                         // caller holds mu_
  std::shared_ptr<Stream> newStream(int device, uint64_t id, int priority);  // caller holds mu_

  Memory memory_;
  std::mutex mu_;
  uint64_t nextId_ = 1;
  bool exiting_ = false;                                 // the exit hook ran
  std::vector<std::shared_ptr<Stream>> defaultStreams_;  // created at first use
  std::unordered_map<uint64_t, std::shared_ptr<Stream>> streams_;
  std::unordered_map<uint64_t, std::shared_ptr<Event>> events_;
};

}  // namespace xdev
