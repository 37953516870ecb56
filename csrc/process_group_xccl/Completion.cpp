// Completion.cpp — the completion thread of a backend: the queue of Works whose completion
// is published in the background (their futures, async error handling), the loop that
// completes them, and what happens to the group when one failed (handleAsyncError).
// CompletionQueue in ProcessGroupXCCL.hpp says why the thread sweeps instead of being woken.
#include <cstdio>
#include <cstdlib>

#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

void ProcessGroupXCCL::enqueueForCompletion(
    const std::vector<c10::intrusive_ptr<WorkXCCL>>& works) {
  std::vector<c10::intrusive_ptr<WorkXCCL>> finished;  // released after the lock (below)
  std::lock_guard<std::mutex> g(cq_->mu);
  // Keep the queue short without waking anyone: drop what callers already completed.
  takeFinished(cq_->works, finished);
  for (const auto& w : works) {
    w->setCompletionQueue(cq_);
    cq_->works.push_back(w);
  }
}

// Moves the finished Works at the front of the queue into `out`. Never drop them under
// cq_->mu: the last reference to a Work frees its tensors, whose Python objects want the GIL,
// while a caller holding the GIL may be waiting for cq_->mu (getFuture(), enqueueing): the
// completion thread then waits for the GIL and the caller for the lock, for ever (found by
// the fault suite, seed 1, runs 13 and 77). Callers release `out` after unlocking.
void ProcessGroupXCCL::takeFinished(std::deque<c10::intrusive_ptr<WorkXCCL>>& q,
                                    std::vector<c10::intrusive_ptr<WorkXCCL>>& out) {
  while (!q.empty() && q.front()->done()) {
    out.push_back(std::move(q.front()));
    q.pop_front();
  }
}

// Takes the next Work that needs a blocking completion: one whose future was requested,
// one that failed or passed its deadline, or any at shutdown. Works that finished are
// completed and dropped by a non-blocking query on the way. Returns null at shutdown.
c10::intrusive_ptr<WorkXCCL> ProcessGroupXCCL::nextWorkToComplete() {
  std::vector<c10::intrusive_ptr<WorkXCCL>> finished;  // released unlocked (takeFinished)
  std::unique_lock<std::mutex> lk(cq_->mu);
  for (;;) {
    if (cq_->exiting) return nullptr;
    auto& q = cq_->works;
    takeFinished(q, finished);
    if (!finished.empty()) {
      lk.unlock();
      finished.clear();
      lk.lock();
      continue;  // the queue may have changed meanwhile
    }
    if (q.empty()) {
      if (cq_->stop) return nullptr;
      cq_->urgent = false;
      cq_->cv.wait_for(lk, std::chrono::milliseconds(kSweepMs));
      continue;
    }
    c10::intrusive_ptr<WorkXCCL> w = q.front();
    if (cq_->stop || w->futureWanted() || std::chrono::steady_clock::now() >= w->deadline()) {
      q.pop_front();
      return w;
    }
    lk.unlock();
    xcclResult_t r = xcclInProgress;
    std::string detail;
    auto st = w->hasEvent() ? w->poll(0, r, detail) : WorkXCCL::Status::kRunning;
    if (st == WorkXCCL::Status::kDone) {
      w->complete(nullptr);  // unlocked: future callbacks may launch collectives
      w.reset();             // unlocked too: it may be the last reference (takeFinished)
      lk.lock();
      continue;
    }
    if (st == WorkXCCL::Status::kRunning) w.reset();  // before locking, as above
    lk.lock();
    if (st != WorkXCCL::Status::kRunning) {  // failed: the blocking path reports and handles it
      if (!q.empty() && q.front() == w) q.pop_front();
      return w;
    }
    cq_->cv.wait_for(lk, std::chrono::milliseconds(kSweepMs),
                     [&] { return cq_->stop || cq_->exiting || cq_->urgent; });
    cq_->urgent = false;
  }
}

void ProcessGroupXCCL::completionLoop() {
  for (;;) {
    c10::intrusive_ptr<WorkXCCL> w = nextWorkToComplete();
    if (!w) return;
    while (!w->done()) {
      if (exitingNow()) return;  // before exit: do not wait out a Work (nothing will read it)
      xcclResult_t r = xcclInProgress;
      std::string detail;
      auto st = w->poll(kPollMs, r, detail);
      if (w->done()) break;
      if (st == WorkXCCL::Status::kClosed) {
        w->complete(distError("xccl " + std::string(w->opName()) + ": " + w->comm_->reason()));
        break;
      }
      if (st == WorkXCCL::Status::kDone) {
        w->complete(nullptr);
        break;
      }
      if (st == WorkXCCL::Status::kRunning) {
        if (std::chrono::steady_clock::now() < w->deadline()) continue;
        // The library enforces its own per-op deadline; this is the backstop.
        r = xcclTimeout;
        detail = "timed out after the process-group timeout";
      }
      auto err = w->makeError(r, "operation failed: " + detail);
      w->complete(err);
      handleAsyncError(err);
      break;
    }
  }
}

void ProcessGroupXCCL::handleAsyncError(std::exception_ptr error) {
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  }
  switch (errorMode_) {
    case AsyncErrorMode::kNoHandling:
      return;
    case AsyncErrorMode::kCleanUpOnly:
      abortComm(what);
      return;
    case AsyncErrorMode::kTearDown:
    case AsyncErrorMode::kSkipCleanUp:
      std::fprintf(stderr,
                   "[torch_xccl] rank %d: %s\n[torch_xccl] tearing down the process "
                   "(TORCH_XCCL_ASYNC_ERROR_HANDLING=%d)\n",
                   getRank(), what.c_str(), static_cast<int>(errorMode_));
      std::fflush(stderr);
      if (errorMode_ == AsyncErrorMode::kTearDown) abortComm(what);
      std::abort();
  }
}

}  // namespace torch_xccl
