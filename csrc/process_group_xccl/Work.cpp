// Work.cpp — WorkXCCL (completion, wait, futures, errors) and CommState (the shared
// communicator handle and its close/abort).
#include <algorithm>
#include <sstream>
#include <thread>

#include "FlightDump.hpp"
#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

// ---------------------------------------------------------------- CommState

void CommState::close(const std::string& why, bool destroy) {
  {
    std::lock_guard<std::mutex> g(errMu);
    if (closedReason.empty()) closedReason = why;
  }
  std::lock_guard<std::mutex> one(closeMu);
  closing.store(true);
  // An abort must not wait for an operation a caller runs on its own thread under the shared
  // lock (a blocking collective, XCCL_STREAM_CALLER): interrupt it first. Only close() frees
  // the handle, and closeMu serialises it, so reading it here is safe. A destroy drains.
  if (!destroy && comm != nullptr) xcclCommInterrupt(comm);
  std::unique_lock<std::shared_mutex> lk(rw);
  if (comm == nullptr) return;
  xcclComm_t c = comm;
  comm = nullptr;
  if (destroy) {
    xcclCommDestroy(c);
  } else {
    xcclCommInterrupt(c);  // (again: the lock is held now) freed with the state
    retired = c;
  }
}

void CommState::awaitCreation() {
  std::lock_guard<std::mutex> one(createMu);
  while (creating.load(std::memory_order_acquire)) {
    xcclResult_t st = xcclInProgress;
    std::string detail;
    {
      std::shared_lock<std::shared_mutex> lk(rw);
      if (comm == nullptr) {  // closed meanwhile: use() reports the reason
        creating.store(false, std::memory_order_release);
        return;
      }
      if (xcclCommGetAsyncError(comm, &st) != xcclSuccess) st = xcclInternalError;
      if (st != xcclInProgress && st != xcclSuccess) detail = xcclGetLastError(comm);
    }
    if (st == xcclSuccess) {
      creating.store(false, std::memory_order_release);
      return;
    }
    if (st != xcclInProgress) {
      // Later uses reach libxccl, which refuses them naming the same failure.
      creating.store(false, std::memory_order_release);
      throwDist("xccl init (non-blocking): rank " + std::to_string(rank) + " of " +
                std::to_string(size) + " (group '" + name + "'): " + libError(st, detail.c_str()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

CommState::~CommState() {
  if (retired != nullptr) xcclCommAbort(retired);
  if (comm != nullptr) xcclCommAbort(comm);
}

xcclComm_t CommState::shrink(const std::vector<int>& exclude, int xcclFlags) {
  xcclComm_t out = nullptr;
  xcclResult_t r = xcclSuccess;
  std::string detail;
  bool had = useEvenClosed([&](xcclComm_t from) {
    r = xcclCommShrink(from, exclude.data(), static_cast<int>(exclude.size()), &out, nullptr,
                       xcclFlags);
    if (r != xcclSuccess) detail = xcclGetLastError(from);
  });
  TORCH_CHECK(had, "xccl shrink of group '", name, "': its communicator was destroyed (", reason(),
              ")");
  if (r != xcclSuccess) {
    throwDist("xccl shrink of group '" + name + "' (rank " + std::to_string(rank) + " of " +
              std::to_string(size) + "): " + libError(r, detail.c_str()));
  }
  return out;
}

// ---------------------------------------------------------------- WorkXCCL

WorkXCCL::WorkXCCL(int rank, c10d::OpType type, const char* opName, uint64_t seq,
                   std::vector<at::Tensor> outputs, std::vector<at::Tensor> keepAlive,
                   std::function<void()> post, std::chrono::milliseconds timeout,
                   std::shared_ptr<CommState> comm, bool blockingWait, AsyncErrorMode errorMode,
                   std::optional<c10::Stream> stream, bool hostBlocking)
    : c10d::Work(rank, type, nullptr, std::nullopt),
      opName_(opName),
      seq_(seq),
      outputs_(std::move(outputs)),
      keepAlive_(std::move(keepAlive)),
      post_(std::move(post)),
      timeout_(timeout),
      deadline_(std::chrono::steady_clock::now() + timeout),
      comm_(std::move(comm)),
      blockingWait_(blockingWait),
      errorMode_(errorMode),
      stream_(stream),
      hostBlocking_(hostBlocking) {
  // A device future is marked at launch (setEnd); a host one only when someone asks for it
  // (getFuture): most host Works are waited for and dropped, and the future's type, value
  // and locks were a fifth of the backend's per-call work on a small collective.
  if (stream_) future_ = makeFuture();
}

c10::intrusive_ptr<c10::ivalue::Future> WorkXCCL::makeFuture() const {
  return c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::ofTensors(),
      stream_ ? std::vector<c10::Device>{stream_->device()} : std::vector<c10::Device>{});
}

void WorkXCCL::markFuture(const c10::intrusive_ptr<c10::ivalue::Future>& f) {
  if (auto e = exception()) {
    f->setError(e);
  } else {
    f->markCompleted(c10::IValue(outputs_));
  }
}

float WorkXCCL::getDuration() const {
  TORCH_CHECK(callerTimes_ || startOnDevice_ || startEvent_, "xccl ", opName_,
              ": _get_duration() needs TORCH_XCCL_ENABLE_TIMING=1 in the environment when the "
              "process group is made");
  if (callerTimes_) {
    return std::chrono::duration<float, std::milli>(callerTimes_->second - callerTimes_->first)
        .count();
  }
  if (startOnDevice_) {
    TORCH_CHECK(end_ && end_->query(), "xccl ", opName_,
                ": _get_duration() before the operation completed (wait() for it first)");
    return startOnDevice_->elapsedMs(*end_);
  }
  TORCH_CHECK(hasEvent_.load(), "xccl ", opName_,
              ": _get_duration() before the operation completed (wait() for it first)");
  float ms = 0;
  xcclResult_t r = xcclInternalError;
  std::string detail;
  const bool open = comm_->useEvenClosed([&](xcclComm_t) {
    r = xcclEventElapsedTime(&ms, &*startEvent_, &event_);
    if (r != xcclSuccess && r != xcclInProgress) detail = xcclGetLastError(nullptr);
  });
  TORCH_CHECK(open, "xccl ", opName_, ": _get_duration(): the communicator was destroyed");
  TORCH_CHECK(r != xcclInProgress, "xccl ", opName_,
              ": _get_duration() before the operation completed (wait() for it first)");
  TORCH_CHECK(r == xcclSuccess, "xccl ", opName_,
              ": _get_duration(): ", libError(r, detail.c_str()));
  return ms;
}

void WorkXCCL::setEvent(const xcclEvent_t& ev) {
  event_ = ev;
  hasEvent_.store(true);
}

void WorkXCCL::orderCurrentStream() { end_->block(currentStream(stream_->device())); }

// Called with the communication stream current (finishOnStream): the future records its
// event there, after the operation.
void WorkXCCL::setEnd(std::shared_ptr<DeviceEvent> end) {
  end_ = std::move(end);
  futureMarked_ = true;
  future_->markCompleted(c10::IValue(outputs_));
}

WorkXCCL::Status WorkXCCL::poll(int64_t waitMs, xcclResult_t& r, std::string& detail) {
  r = xcclInProgress;
  bool failed = false;
  bool open = comm_->use([&](xcclComm_t c) {
    r = waitMs > 0 ? xcclEventWait(&event_, waitMs) : xcclEventQuery(&event_);
    if (r == xcclTimeout || r == xcclInProgress) {
      // xcclTimeout is also what an operation failed by its own deadline gives: when the
      // communicator has failed and this operation is not done, it is the one that failed
      // (operations complete in order), and the communicator's error says what it waited for.
      xcclResult_t async = xcclSuccess;
      if (xcclCommGetAsyncError(c, &async) == xcclSuccess && async != xcclSuccess) {
        r = async;
        failed = true;
      }
    } else if (r != xcclSuccess) {
      failed = true;
    }
    if (failed) detail = xcclGetLastError(c);
  });
  if (!open) return Status::kClosed;
  if (!failed && (r == xcclTimeout || r == xcclInProgress)) return Status::kRunning;
  if (r != xcclSuccess) return Status::kFailed;
  if (end_) {
    // The collective is done; what remains on the stream is its post step (copies).
    if (waitMs > 0) {
      end_->synchronize();
    } else if (!end_->query()) {
      return Status::kRunning;
    }
  }
  return Status::kDone;
}

bool WorkXCCL::settle(Status st, xcclResult_t r, const std::string& detail) {
  switch (st) {
    case Status::kRunning:
      break;
    case Status::kDone:
      complete(nullptr);
      break;
    case Status::kClosed:
      complete(distError("xccl " + std::string(opName_) + ": " + comm_->reason()));
      break;
    case Status::kFailed:
      complete(makeError(r, "operation failed: " + detail));
      break;
  }
  return done_.load();
}

std::exception_ptr WorkXCCL::makeError(xcclResult_t r, const std::string& what) const {
  if (r == xcclTimeout) timedOut_.store(true);
  std::ostringstream os;
  os << "xccl " << opName_ << ": " << what << " (rank " << comm_->rank << ", group '" << comm_->name
     << "', op #" << seq_ << "): " << libError(r, nullptr);
  if (comm_->desync && collSeq_ > 0) os << comm_->desync->report(collSeq_);
  return distError(os.str());
}

void WorkXCCL::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> g(completeMu_);
    if (done_.load()) return;
    if (!error && post_) {
      try {
        post_();
      } catch (...) {
        error = std::current_exception();
      }
    }
    keepAlive_.clear();
    post_ = nullptr;
    // Before done_: a failure's dump is on disk before a waiter can raise.
    flight::retire(flightId_, error, timedOut_.load());
    // The outcome before done_: a thread that sees done_ (a waiter whose own complete()
    // returned early) must find the error, not a Work that looks successful.
    finish(error);
    done_.store(true);
  }
  if (futureMarked_) return;  // a device future completed at launch
  // Exactly one of complete() and getFuture() marks the future: whichever finds it made and
  // the Work settled, under futureMu_.
  c10::intrusive_ptr<c10::ivalue::Future> f;
  {
    std::lock_guard<std::mutex> g(futureMu_);
    settled_ = true;
    f = future_;
  }
  if (f) markFuture(f);  // outside the locks: its callbacks may launch collectives
}

bool WorkXCCL::isCompleted() {
  if (done_.load()) return true;
  if (!hasEvent_.load()) return false;
  xcclResult_t r = xcclInProgress;
  std::string detail;
  return settle(poll(0, r, detail), r, detail);
}

bool WorkXCCL::isSuccess() const {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr WorkXCCL::exception() const {
  std::lock_guard<std::mutex> g(mutex_);
  return exception_;
}

int WorkXCCL::sourceRank() const {
  TORCH_CHECK(peerIsOutput_, "xccl ", opName_,
              ": sourceRank() is only defined for recv from "
              "any source");
  TORCH_CHECK(done_.load(), "xccl ", opName_, ": sourceRank() before the receive completed");
  return peer_;
}

std::vector<at::Tensor> WorkXCCL::result() { return outputs_; }

bool WorkXCCL::wait(std::chrono::milliseconds timeout) {
  if (!done_.load()) {
    TORCH_CHECK(hasEvent_.load(), "xccl ", opName_,
                ": wait() on an operation issued inside a coalescing block; wait on the Work "
                "returned when the block ends");
  }
  if (onDevice() && !blockingWait_ && !hostBlocking_) {
    // ProcessGroupNCCL semantics: the caller's current stream waits for the operation; the
    // host does not. A failure already known is raised here; a later one by the watchdog
    // (the completion thread) through TORCH_XCCL_ASYNC_ERROR_HANDLING.
    if (!done_.load()) {
      xcclResult_t r = xcclInProgress;
      std::string detail;
      settle(poll(0, r, detail), r, detail);
    }
    if (auto e = exception()) std::rethrow_exception(e);
    orderCurrentStream();
    return true;
  }
  if (!done_.load()) {
    auto limit = timeout == kNoTimeout ? timeout_ : timeout;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done_.load()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) {
        auto err =
            makeError(xcclTimeout, "wait timed out after " + std::to_string(limit.count()) + " ms");
        complete(err);  // first, so this work reports the timeout (not the abort below)
        if (blockingWait_ || errorMode_ == AsyncErrorMode::kTearDown ||
            errorMode_ == AsyncErrorMode::kCleanUpOnly) {
          // The group cannot make progress consistently any more: fail it everywhere.
          comm_->close("aborted after a timed-out wait in " + std::string(opName_), false);
        }
        break;
      }
      xcclResult_t r = xcclInProgress;
      std::string detail;
      auto st = poll(std::min<int64_t>(left, kPollMs), r, detail);
      if (done_.load()) break;
      settle(st, r, detail);
    }
  }
  auto e = exception();
  if (e) std::rethrow_exception(e);
  if (end_) orderCurrentStream();
  return true;
}

// As ProcessGroupNCCL: on a device, the current stream waits for the operation (the host does
// not); on the host communicator, the operation is waited for.
void WorkXCCL::synchronize() {
  if (onDevice() && end_) {
    orderCurrentStream();
    return;
  }
  wait(kNoTimeout);
}

void WorkXCCL::abort() {
  comm_->close("aborted by Work.abort() of " + std::string(opName_), false);
  complete(distError("xccl " + std::string(opName_) + ": aborted"));
}

c10::intrusive_ptr<c10::ivalue::Future> WorkXCCL::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  bool markNow = false;
  {
    std::lock_guard<std::mutex> g(futureMu_);
    if (!future_) {
      future_ = makeFuture();
      markNow = settled_;  // complete() ran before there was a future to mark
    }
    f = future_;
  }
  if (markNow) {
    markFuture(f);
  } else if (!futureWanted_.exchange(true) && !done_.load()) {
    if (auto q = completionQueue_.lock()) q->wake();
  }
  return f;
}

}  // namespace torch_xccl
