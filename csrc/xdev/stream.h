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
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "activity.h"
#include "xdev_runtime.h"

namespace xdev {

using Task = std::function<void()>;

// A point in a stream that another thread releases (xdevStreamHold / xdevHoldRelease), or
// fails (xdevHoldFail): the stream fails where the gate stands (see Stream::status).
struct Gate {
  bool open = false;  // guarded by the owning stream's mutex
  bool failed = false;
  std::string why;  // what failed, when failed
  // Activity recording (activity.h): set when recording was on at xdevStreamHold.
  std::string name;
  int64_t enqueuedNs = 0;  // 0: not recorded
  uint64_t externalId = 0;
};

class Stream {
 public:
  Stream(int device, uint64_t id, int priority) : device_(device), id_(id), priority_(priority) {}
  ~Stream();  // drains and joins the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }
  uint64_t id() const { return id_; }
  int priority() const { return priority_; }

  // Appends task and returns its position. Work (skippable) on a stream that has failed is
  // refused with xdevErrorStreamFailed; queued behind a failure that comes later, it is
  // counted but not run, as a device does not run kernels after a fault. Bookkeeping tasks
  // (event timestamps) pass skippable = false and always run.
  // `label` names the task in the activity records while recording is on (activity.h).
  uint64_t enqueue(Task task, bool skippable = true, activity::Label label = {});
  // Appends a gate: later positions are not reached until openGate(gate). The gate itself
  // needs no worker: openGate() counts it done when nothing runs before it.
  uint64_t enqueueGate(const std::shared_ptr<Gate>& gate);
  // why != nullptr: the gate opens failed, and so does the stream from its position on.
  void openGate(const std::shared_ptr<Gate>& gate, const std::string* why = nullptr);
  // Calls fn (on whichever thread advances this stream, or now) once pos is reached. It runs
  // with no stream lock held. xdevStreamWaitEvent uses it to open a gate on the waiting
  // stream: a wait between streams then needs no worker thread on either side.
  void whenReached(uint64_t pos, std::function<void()> fn);
  // Position of the last task enqueued so far (0: none).
  uint64_t tail();
  bool reached(uint64_t pos);
  // Blocks until pos is done. Throws Failure(InvalidValue) when called from this stream's
  // own worker for a position it would never reach.
  void waitFor(uint64_t pos);
  // The sticky error of a task that threw (xdevSuccess if none), else xdevErrorStreamFailed
  // once the stream has passed a failed gate (a failed collective, or a wait on a stream that
  // had failed).
  xdevError_t error();
  // The outcome of the work up to position pos, reached: a task's launch failure (sticky, as
  // before), or a failed gate at or before pos. Throws Failure with the failure's message.
  void check(uint64_t pos);
  // The failure in effect at pos, if any ("" when none).
  std::string failureAt(uint64_t pos);
  // Forgets launch failures and failed gates (xdevDeviceClearErrors): later work runs again.
  void clearErrors();

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
  struct Item {
    Task task;                   // or:
    std::shared_ptr<Gate> gate;  // a gate
    bool skippable = true;       // a task not run once the stream has failed
    activity::Label label;       // name null: not recorded
  };
  // Counts the head item done (a failed gate fails the stream at its position).
  void countItemLocked(const Item& item);
  bool failedLocked() const { return failedAt_ != 0; }
  bool runnableLocked() const {  // the head can be taken: a task, or a gate already open
    return !queue_.empty() && (!queue_.front().gate || queue_.front().gate->open);
  }
  std::deque<Item> queue_;
  bool running_ = false;  // the worker is inside a task (popped, not yet counted)
  using Watch = std::function<void()>;
  std::multimap<uint64_t, Watch> watches_;  // by position: the due ones are a prefix
  // Moves the watches that completed_ (or abandonment) satisfies into `due`.
  void takeDueLocked(std::vector<Watch>& due);
  static void fire(std::vector<Watch>& due);
  // One more position done: wakes waiters and runs the watches it satisfies (unlocked).
  void countOneLocked(std::unique_lock<std::mutex>& lock);
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  int64_t lastDoneNs_ = 0;  // while recording: when the last position was done
  xdevError_t error_ = xdevSuccess;
  std::string thrown_;  // what the first host function that threw said
  // A task ran: ok, or it threw saying `why` (the first throw is kept as the sticky error).
  void noteThrowLocked(bool ok, const std::string& why);
  uint64_t failedAt_ = 0;   // position of the first failed gate passed (0: none)
  std::string failure_;     // its message
  bool stopping_ = false;   // the worker exits once the queue is empty
  bool abandoned_ = false;  // process exit: positions count as reached
  bool exited_ = false;
  std::thread worker_;
};

}  // namespace xdev
