// Work.cpp — WorkXCCL (completion, wait, futures, errors) and CommState (the shared
// communicator handle and its close/abort).
#include <algorithm>
#include <sstream>

#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

// ---------------------------------------------------------------- CommState

void CommState::close(const std::string& why, bool destroy) {
  {
    std::lock_guard<std::mutex> g(errMu);
    if (closedReason.empty()) closedReason = why;
  }
  closing.store(true);
  std::unique_lock<std::shared_mutex> lk(rw);
  if (comm == nullptr) return;
  xcclComm_t c = comm;
  comm = nullptr;
  if (destroy) {
    xcclCommDestroy(c);
  } else {
    xcclCommAbort(c);
  }
}

// ---------------------------------------------------------------- WorkXCCL

WorkXCCL::WorkXCCL(int rank, c10d::OpType type, const char* opName, uint64_t seq,
                   std::vector<at::Tensor> outputs, std::vector<at::Tensor> keepAlive,
                   std::function<void()> post, std::chrono::milliseconds timeout,
                   std::shared_ptr<CommState> comm, bool blockingWait, AsyncErrorMode errorMode)
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
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

void WorkXCCL::setEvent(const xcclEvent_t& ev) {
  event_ = ev;
  hasEvent_.store(true);
}

std::exception_ptr WorkXCCL::makeError(xcclResult_t r, const std::string& what) const {
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
    done_.store(true);
  }
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool WorkXCCL::isCompleted() {
  if (done_.load()) return true;
  if (!hasEvent_.load()) return false;
  xcclResult_t r = xcclInProgress;
  if (!comm_->use([&](xcclComm_t) { r = xcclEventQuery(&event_); })) {
    complete(distError("xccl " + std::string(opName_) + ": " + comm_->reason()));
    return true;
  }
  if (r == xcclSuccess) {
    complete(nullptr);
  } else if (r != xcclInProgress) {
    std::string detail;
    comm_->use([&](xcclComm_t c) { detail = xcclGetLastError(c); });
    complete(makeError(r, "operation failed: " + detail));
  }
  return done_.load();
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
      bool open = comm_->use([&](xcclComm_t c) {
        r = xcclEventWait(&event_, std::min<int64_t>(left, kPollMs));
        if (r != xcclSuccess && r != xcclTimeout && r != xcclInProgress) {
          detail = xcclGetLastError(c);
        }
      });
      if (done_.load()) break;
      if (!open) {
        complete(distError("xccl " + std::string(opName_) + ": " + comm_->reason()));
      } else if (r == xcclSuccess) {
        complete(nullptr);
      } else if (r != xcclTimeout && r != xcclInProgress) {
        complete(makeError(r, "operation failed: " + detail));
      }
    }
  }
  auto e = exception();
  if (e) std::rethrow_exception(e);
  return true;
}

void WorkXCCL::synchronize() { wait(kNoTimeout); }

void WorkXCCL::abort() {
  comm_->close("aborted by Work.abort() of " + std::string(opName_), false);
  complete(distError("xccl " + std::string(opName_) + ": aborted"));
}

c10::intrusive_ptr<c10::ivalue::Future> WorkXCCL::getFuture() {
  if (!futureWanted_.exchange(true) && !done_.load()) {
    if (auto q = completionQueue_.lock()) q->wake();
  }
  return future_;
}

}  // namespace torch_xccl
