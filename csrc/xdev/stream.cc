// The stream worker: runs tasks in order, records a task that throws as a launch failure.
#include "stream.h"

#include <algorithm>

#include "report.h"
#include "status.h"

namespace xdev {

namespace {

thread_local Stream* tlsWorkerOf = nullptr;

// Runs task; false if it threw, with what it said in *why.
bool runTask(Task& task, uint64_t streamId, std::string* why) {
  try {
    task();
    return true;
  } catch (const std::exception& e) {
    *why = e.what();
  } catch (...) {
    *why = "an exception that is not a std::exception";
  }
  reportWarn(strCat("stream ", streamId, ": host function threw: ", *why));
  return false;
}

}  // namespace

Stream* Stream::current() { return tlsWorkerOf; }

void Stream::takeDueLocked(std::vector<Watch>& due) {
  auto it = watches_.begin();
  while (it != watches_.end() && (it->first <= completed_ || abandoned_)) {
    due.push_back(std::move(it->second));
    it = watches_.erase(it);
  }
}

void Stream::countOneLocked(std::unique_lock<std::mutex>& lock) {
  ++completed_;
  if (activity::enabled()) lastDoneNs_ = activity::nowNs();
  doneCv_.notify_all();
  std::vector<Watch> due;
  takeDueLocked(due);
  if (due.empty()) return;
  lock.unlock();  // a watch takes another stream's lock
  fire(due);
  lock.lock();
}

void Stream::fire(std::vector<Watch>& due) {
  for (auto& w : due) w();
  due.clear();
}

void Stream::whenReached(uint64_t pos, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completed_ < pos && !abandoned_) {
      watches_.emplace(pos, std::move(fn));
      return;
    }
  }
  fn();
}

Stream::~Stream() {
  std::unique_lock<std::mutex> lock(mu_);
  doneCv_.wait(lock, [&] { return completed_ == enqueued_ || abandoned_; });
  stopLocked(lock);
}

void Stream::countItemLocked(const Item& item) {
  if (item.gate && item.gate->failed && failedAt_ == 0) {
    failedAt_ = completed_ + 1;  // the gate's own position
    failure_ = item.gate->why;
  }
}

uint64_t Stream::enqueue(Task task, bool skippable, activity::Label label) {
  if (label.name != nullptr && activity::enabled()) {
    label.externalId = activity::externalId();
  } else {
    label.name = nullptr;
  }
  std::unique_lock<std::mutex> lock(mu_);
  XDEV_REQUIRE(!(skippable && failedLocked()), xdevErrorStreamFailed, "stream ", id_,
               " has failed: ", failure_);
  if (abandoned_) {  // process exit: no worker any more, run it here
    uint64_t pos = ++enqueued_;
    lock.unlock();
    std::string why;
    bool ok = runTask(task, id_, &why);
    lock.lock();
    noteThrowLocked(ok, why);
    countOneLocked(lock);
    return pos;
  }
  XDEV_REQUIRE(!stopping_, xdevErrorInvalidResourceHandle, "stream ", id_, " is being destroyed");
  if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  queue_.push_back(Item{std::move(task), nullptr, skippable, label});
  uint64_t pos = ++enqueued_;
  lock.unlock();
  workCv_.notify_one();
  return pos;
}

uint64_t Stream::enqueueGate(const std::shared_ptr<Gate>& gate) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t pos = ++enqueued_;
  if (abandoned_) {  // process exit: nothing waits any more (watches fired at abandon)
    ++completed_;
    return pos;
  }
  XDEV_REQUIRE(!stopping_, xdevErrorInvalidResourceHandle, "stream ", id_, " is being destroyed");
  queue_.push_back(Item{nullptr, gate, false, {}});
  return pos;
}

void Stream::openGate(const std::shared_ptr<Gate>& gate, const std::string* why) {
  bool wakeWorker = false;
  std::vector<Watch> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gate->open = true;
    if (why != nullptr) {
      gate->failed = true;
      gate->why = *why;
    }
    if (running_) return;  // the worker counts it after the task before it
    // A recorded hold the stream was waiting at: from when it got there until now.
    if (gate->enqueuedNs != 0 && !queue_.empty() && queue_.front().gate == gate) {
      activity::record(gate->name.empty() ? "hold" : gate->name.c_str(), xdevActivityHold, device_,
                       id_, std::max(gate->enqueuedNs, lastDoneNs_), activity::nowNs(),
                       gate->externalId, 0);
    }
    // Count the open gates at the head here, on the releasing thread: a host waiting on the
    // stream wakes from this thread, and the worker sleeps on unless a task follows.
    bool advanced = false;
    while (!queue_.empty() && queue_.front().gate && queue_.front().gate->open) {
      countItemLocked(queue_.front());
      queue_.pop_front();
      ++completed_;
      advanced = true;
    }
    if (advanced) {
      doneCv_.notify_all();
      takeDueLocked(due);
    }
    wakeWorker = !queue_.empty();
  }
  if (wakeWorker) workCv_.notify_one();
  fire(due);  // e.g. gates of streams waiting on this one: they advance from here too
}

uint64_t Stream::tail() {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

bool Stream::reached(uint64_t pos) {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= pos || abandoned_;
}

void Stream::waitFor(uint64_t pos) {
  std::unique_lock<std::mutex> lock(mu_);
  if (completed_ >= pos || abandoned_) return;
  XDEV_REQUIRE(tlsWorkerOf != this, xdevErrorInvalidValue, "a host function of stream ", id_,
               " cannot wait for work queued on that same stream after it");
  doneCv_.wait(lock, [&] { return completed_ >= pos || abandoned_; });
}

void Stream::noteThrowLocked(bool ok, const std::string& why) {
  if (ok || error_ != xdevSuccess) return;  // the first one is the one reported
  error_ = xdevErrorLaunchFailure;
  thrown_ = why;
}

xdevError_t Stream::error() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_ != xdevSuccess) return error_;
  return failedAt_ != 0 && completed_ >= failedAt_ ? xdevErrorStreamFailed : xdevSuccess;
}

std::string Stream::failureAt(uint64_t pos) {
  std::lock_guard<std::mutex> lock(mu_);
  return failedAt_ != 0 && pos >= failedAt_ ? failure_ : std::string();
}

void Stream::check(uint64_t pos) {
  std::unique_lock<std::mutex> lock(mu_);
  XDEV_REQUIRE(error_ == xdevSuccess, error_, "stream ", id_, ": a host function threw: ", thrown_);
  XDEV_REQUIRE(failedAt_ == 0 || pos < failedAt_, xdevErrorStreamFailed, "stream ", id_,
               " has failed: ", failure_);
}

void Stream::clearErrors() {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = xdevSuccess;
  thrown_.clear();
  failedAt_ = 0;
  failure_.clear();
}

void Stream::drainAndStop() {
  std::unique_lock<std::mutex> lock(mu_);
  XDEV_REQUIRE(tlsWorkerOf != this, xdevErrorInvalidValue, "a host function of stream ", id_,
               " cannot destroy that stream");
  doneCv_.wait(lock, [&] { return completed_ == enqueued_ || abandoned_; });
  stopLocked(lock);
}

void Stream::stopLocked(std::unique_lock<std::mutex>& lock) {
  stopping_ = true;
  std::thread worker = std::move(worker_);
  lock.unlock();
  workCv_.notify_all();
  if (!worker.joinable()) return;
  if (worker.get_id() == std::this_thread::get_id()) {
    worker.detach();  // the last reference went away inside our own task
  } else {
    worker.join();
  }
}

void Stream::abandon(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu_);
  abandoned_ = true;
  stopping_ = true;
  std::deque<Item> dropped;
  dropped.swap(queue_);
  std::vector<Watch> due;
  takeDueLocked(due);
  doneCv_.notify_all();
  workCv_.notify_all();
  lock.unlock();
  dropped.clear();  // outside the lock: a task may own another stream
  fire(due);
  lock.lock();
  if (!worker_.joinable()) return;
  bool exited = doneCv_.wait_for(lock, grace, [&] { return exited_; });
  std::thread worker = std::move(worker_);
  lock.unlock();
  if (exited && worker.get_id() != std::this_thread::get_id()) {
    worker.join();
  } else {
    // Stuck in a host function (or exit() called from one): the process ends around it.
    worker.detach();
  }
}

void Stream::run() {
  tlsWorkerOf = this;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    workCv_.wait(lock, [&] { return runnableLocked() || (stopping_ && queue_.empty()); });
    if (!runnableLocked()) break;  // stopping, and nothing left
    Item item = std::move(queue_.front());
    queue_.pop_front();
    // A task behind a failure is not run (its inputs are not what it was queued for); it
    // still counts, so waiters wake and see the failure.
    if (!item.gate && !(item.skippable && failedLocked())) {
      running_ = true;
      lock.unlock();
      std::string why;
      const int64_t t0 = item.label.name != nullptr ? activity::nowNs() : 0;
      bool ok = runTask(item.task, id_, &why);
      if (item.label.name != nullptr) {
        activity::record(item.label.name, item.label.kind, device_, id_, t0, activity::nowNs(),
                         item.label.externalId, item.label.bytes);
      }
      item.task = nullptr;  // release what it captured before the position counts as done
      lock.lock();
      running_ = false;
      noteThrowLocked(ok, why);
    }
    countItemLocked(item);  // a gate here was released while a task before it ran
    countOneLocked(lock);
  }
  exited_ = true;
  doneCv_.notify_all();
}

}  // namespace xdev
