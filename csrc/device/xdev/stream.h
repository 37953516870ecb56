// A stream: an ordered queue of tasks run by one worker thread.
//
// Each enqueued task gets the next position (1, 2, ...); completed() counts the tasks done,
// so "position p is done" is completed() >= p. Events and waits are positions.
//
//   caller threads                 worker (started at the first enqueue)
//   enqueue(t) -> p  --queue_-->   pop, run t (an exception: error_ = LaunchFailure),
//   waitFor(p)       <--doneCv_--  ++completed_
//
// At process exit the runtime abandons every stream: queued work is dropped, waiters are
// released, the worker exits after its current task, and later enqueues run on the caller.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "xdev_runtime.h"

namespace xdev {

using Task = std::function<void()>;

class Stream {
 public:
  Stream(int device, uint64_t id, int priority) : device_(device), id_(id), priority_(priority) {}
  ~Stream();  // drains and joins the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }
  uint64_t id() const { return id_; }
  int priority() const { return priority_; }

  // Appends task and returns its position.
  uint64_t enqueue(Task task);
  // Position of the last task enqueued so far (0: none).
  uint64_t tail();
  bool reached(uint64_t pos);
  // Blocks until pos is done. Throws Failure(InvalidValue) when called from this stream's
  // own worker for a position it would never reach.
  void waitFor(uint64_t pos);
  // The sticky error of a task that threw (xdevSuccess if none).
  xdevError_t error();

  // Waits for all queued work, then stops and joins the worker (xdevStreamDestroy).
  void drainAndStop();
  // Process exit: drop queued work, release waiters, stop the worker. Returns once the
  // worker exited or `grace` passed (then the worker is detached).
  void abandon(std::chrono::milliseconds grace);

  // The stream whose worker is the calling thread, or nullptr.
  static Stream* current();

 private:
  void run();
  void stopLocked(std::unique_lock<std::mutex>& lock);

  const int device_;
  const uint64_t id_;
  const int priority_;

  std::mutex mu_;
  std::condition_variable workCv_;  // queue_ gained a task, or stopping_
  std::condition_variable doneCv_;  // completed_ grew, or the worker exited
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  xdevError_t error_ = xdevSuccess;
  bool stopping_ = false;   // the worker exits once the queue is empty
  bool abandoned_ = false;  // process exit: positions count as reached
  bool exited_ = false;
  std::thread worker_;
};

}  // namespace xdev
