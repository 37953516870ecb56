// The stream worker: runs tasks in order, records a task that throws as a launch failure.
#include "stream.h"

#include "common/log.h"
#include "status.h"

namespace xdev {

namespace {

thread_local Stream* tlsWorkerOf = nullptr;

// Runs task; false if it threw.
bool runTask(Task& task, uint64_t streamId) {
  try {
    task();
    return true;
  } catch (const std::exception& e) {
    XCCL_WARN(INIT, "xdev stream ", streamId, ": host function threw: ", e.what());
  } catch (...) {
    XCCL_WARN(INIT, "xdev stream ", streamId, ": host function threw");
  }
  return false;
}

}  // namespace

Stream* Stream::current() { return tlsWorkerOf; }

Stream::~Stream() {
  std::unique_lock<std::mutex> lock(mu_);
  doneCv_.wait(lock, [&] { return completed_ == enqueued_ || abandoned_; });
  stopLocked(lock);
}

uint64_t Stream::enqueue(Task task) {
  std::unique_lock<std::mutex> lock(mu_);
  if (abandoned_) {  // process exit: no worker any more, run it here
    uint64_t pos = ++enqueued_;
    lock.unlock();
    bool ok = runTask(task, id_);
    lock.lock();
    ++completed_;
    if (!ok) error_ = xdevErrorLaunchFailure;
    return pos;
  }
  XDEV_REQUIRE(!stopping_, xdevErrorInvalidResourceHandle, "stream ", id_, " is being destroyed");
  if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  queue_.push_back(std::move(task));
  uint64_t pos = ++enqueued_;
  lock.unlock();
  workCv_.notify_one();
  return pos;
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

xdevError_t Stream::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
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
  std::deque<Task> dropped;
  dropped.swap(queue_);
  doneCv_.notify_all();
  workCv_.notify_all();
  lock.unlock();
  dropped.clear();  // outside the lock: a task may own another stream
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
    workCv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) break;  // stopping, and nothing left
    Task task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    bool ok = runTask(task, id_);
    task = nullptr;  // release what it captured before the position counts as done
    lock.lock();
    if (!ok) error_ = xdevErrorLaunchFailure;
    ++completed_;
    doneCv_.notify_all();
  }
  exited_ = true;
  doneCv_.notify_all();
}

}  // namespace xdev
