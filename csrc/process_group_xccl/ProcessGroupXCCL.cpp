// ProcessGroupXCCL.cpp — the backend itself: construction (communicator rendezvous through
// the c10d Store), launching an operation (enqueue, event, Work), the completion thread,
// coalescing, introspection and the factory. The collectives are in Collectives.cpp, the
// Python module in Bindings.cpp.
#include "ProcessGroupXCCL.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "Utils.hpp"

namespace torch_xccl {

// ---------------------------------------------------------------- ProcessGroupXCCL

ProcessGroupXCCL::ProcessGroupXCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   c10::intrusive_ptr<Options> options)
    : c10d::Backend(rank, size),
      store_(store),
      options_(std::move(options)),
      state_(std::make_shared<CommState>()),
      blockingWait_(blockingWaitFromEnv()),
      errorMode_(errorModeFromEnv()) {
  TORCH_CHECK(store_, "xccl init: no store");
  TORCH_CHECK(size > 0 && rank >= 0 && rank < size, "xccl init: invalid rank ", rank,
              " for group size ", size);
  state_->rank = rank;
  state_->size = size;
  state_->name = options_->group_name.empty() ? std::string("default") : options_->group_name;

  StoreCtx ctx{store_};
  xcclStore_t s{&ctx, &storeSet, &storeGet};
  xcclConfig_t cfg{};
  cfg.timeout_ms = options_->timeout.count() > 0 ? options_->timeout.count() : 0;
  cfg.device = -1;
  cfg.name = state_->name.c_str();
  xcclComm_t comm = nullptr;
  // torch hands each group its own prefix store, so one fixed prefix suffices.
  xcclResult_t r = xcclCommInitRankStore(&comm, size, rank, &s, "xccl/", &cfg);
  if (r != xcclSuccess) {
    throwDist("xccl init: rank " + std::to_string(rank) + " of " + std::to_string(size) +
              " (group '" + state_->name + "'): " + libError(r, xcclGetLastError(nullptr)));
  }
  state_->comm = comm;
  state_->desync = DesyncDebugger::fromEnv(store_, rank, size);
  completion_ = std::thread([this] { completionLoop(); });
}

void ProcessGroupXCCL::stopCompletionThread() {
  {
    std::lock_guard<std::mutex> g(cq_->mu);
    cq_->stop = true;
  }
  cq_->cv.notify_all();
  if (completion_.joinable()) completion_.join();
}

ProcessGroupXCCL::~ProcessGroupXCCL() {
  stopCompletionThread();
  state_->close("process group destroyed", /*destroy=*/true);
}

void ProcessGroupXCCL::shutdown() {
  // Drain: the completion thread finishes what was enqueued (bounded by the op timeouts),
  // then the communicator is destroyed.
  stopCompletionThread();
  state_->close("process group was shut down", /*destroy=*/true);
}

void ProcessGroupXCCL::abort() { abortComm("process group was aborted"); }

void ProcessGroupXCCL::abortComm(const std::string& reason) { state_->close(reason, false); }

std::chrono::milliseconds ProcessGroupXCCL::opTimeout(std::chrono::milliseconds requested) const {
  if (requested.count() > 0) return requested;
  return options_->timeout.count() > 0 ? options_->timeout : kBackendDefaultTimeout;
}

std::string ProcessGroupXCCL::describe() const {
  std::ostringstream os;
  os << "ProcessGroupXCCL(rank=" << getRank() << ", size=" << getSize() << ", group='"
     << state_->name << "', timeout_ms=" << options_->timeout.count()
     << ", blocking_wait=" << blockingWait_
     << ", async_error_handling=" << static_cast<int>(errorMode_) << ")";
  return os.str();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::launch(
    const char* opName, c10d::OpType type, std::chrono::milliseconds timeout,
    std::vector<at::Tensor> outputs, std::vector<at::Tensor> keepAlive, std::function<void()> post,
    const std::function<xcclResult_t()>& enqueue, int** peerSlot) {
  auto work = c10::make_intrusive<WorkXCCL>(
      getRank(), type, opName, seq_.load() + 1, std::move(outputs), std::move(keepAlive),
      std::move(post), opTimeout(timeout), state_, blockingWait_, errorMode_);
  if (peerSlot != nullptr) {
    *peerSlot = work->peerSlot();
    work->setPeerIsOutput(true);
  }
  // xdev tensors: the inputs (and the staging copies just queued) are ready first.
  synchronizeXdev(work->keepAlive_, work->outputs_);
  {
    std::lock_guard<std::mutex> g(state_->enqueueMu);
    xcclResult_t r = xcclSuccess;
    std::string detail;
    xcclEvent_t ev{};
    bool open = state_->use([&](xcclComm_t c) {
      r = enqueue();
      if (r != xcclSuccess) {
        detail = xcclGetLastError(nullptr);
        if (detail.empty()) detail = xcclGetLastError(c);
        return;
      }
      if (!coalescing_) {
        r = xcclEventRecord(&ev, c);
        if (r != xcclSuccess) detail = xcclGetLastError(nullptr);
      }
    });
    if (!open) throwDist(std::string("xccl ") + opName + ": " + state_->reason());
    if (r != xcclSuccess) {
      throwDist(std::string("xccl ") + opName + ": " + libError(r, detail.c_str()));
    }
    seq_.fetch_add(1);
    if (state_->desync && type != c10d::OpType::SEND && type != c10d::OpType::RECV &&
        type != c10d::OpType::RECVANYSOURCE) {
      work->collSeq_ = ++collSeq_;
      const auto& staged = work->keepAlive_.empty() ? work->outputs_ : work->keepAlive_;
      state_->desync->recordIssued(collSeq_, describeCall(opName, staged));
    }
    if (coalescing_) {
      coalesced_.push_back(work);
      return work;
    }
    work->setEvent(ev);
  }
  enqueueForCompletion({work});
  return work;
}

void ProcessGroupXCCL::enqueueForCompletion(
    const std::vector<c10::intrusive_ptr<WorkXCCL>>& works) {
  std::lock_guard<std::mutex> g(cq_->mu);
  // Keep the queue short without waking anyone: drop what callers already completed.
  while (!cq_->works.empty() && cq_->works.front()->done()) cq_->works.pop_front();
  for (const auto& w : works) {
    w->setCompletionQueue(cq_);
    cq_->works.push_back(w);
  }
}

// Takes the next Work that needs a blocking completion: one whose future was requested,
// one that failed or passed its deadline, or any at shutdown. Works that finished are
// completed and dropped by a non-blocking query on the way. Returns null at shutdown.
c10::intrusive_ptr<WorkXCCL> ProcessGroupXCCL::nextWorkToComplete() {
  std::unique_lock<std::mutex> lk(cq_->mu);
  for (;;) {
    auto& q = cq_->works;
    while (!q.empty() && q.front()->done()) q.pop_front();
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
    xcclResult_t r = xcclInProgress;
    lk.unlock();
    bool open = w->hasEvent() && state_->use([&](xcclComm_t) { r = xcclEventQuery(&w->event()); });
    if (open && r == xcclSuccess) {
      w->complete(nullptr);  // unlocked: future callbacks may launch collectives
      lk.lock();
      continue;
    }
    lk.lock();
    if (!open || r != xcclInProgress) {  // failed: the blocking path reports and handles it
      if (!q.empty() && q.front() == w) q.pop_front();
      return w;
    }
    cq_->cv.wait_for(lk, std::chrono::milliseconds(kSweepMs),
                     [&] { return cq_->stop || cq_->urgent; });
    cq_->urgent = false;
  }
}

void ProcessGroupXCCL::completionLoop() {
  for (;;) {
    c10::intrusive_ptr<WorkXCCL> w = nextWorkToComplete();
    if (!w) return;
    while (!w->done()) {
      xcclResult_t r = xcclInProgress;
      std::string detail;
      bool open = state_->use([&](xcclComm_t c) {
        r = xcclEventWait(&w->event(), kPollMs);
        if (r != xcclSuccess && r != xcclTimeout && r != xcclInProgress) {
          detail = xcclGetLastError(c);
        }
      });
      if (w->done()) break;
      if (!open) {
        w->complete(distError("xccl " + std::string(w->opName()) + ": " + state_->reason()));
        break;
      }
      if (r == xcclSuccess) {
        w->complete(nullptr);
        break;
      }
      if (r == xcclTimeout || r == xcclInProgress) {
        if (std::chrono::steady_clock::now() < w->deadline()) continue;
        // The library enforces its own per-op deadline; this is the backstop.
        r = xcclTimeout;
        detail = "timed out after the process-group timeout";
      }
      auto err = w->makeError(r, "operation failed: " + detail);
      w->complete(err);
      handleAsyncError(*w, err, detail);
      break;
    }
  }
}

void ProcessGroupXCCL::handleAsyncError(WorkXCCL& work, std::exception_ptr error,
                                        const std::string& msg) {
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

// ---------------------------------------------------------------- coalescing

void ProcessGroupXCCL::startCoalescing() {
  TORCH_CHECK(!coalescing_, "xccl startCoalescing: already inside a coalescing block");
  xcclResult_t r = xcclGroupStart();
  if (r != xcclSuccess)
    throwDist("xccl startCoalescing: " + libError(r, xcclGetLastError(nullptr)));
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::endCoalescing() {
  TORCH_CHECK(coalescing_, "xccl endCoalescing: no coalescing block was started");
  coalescing_ = false;
  auto works = std::move(coalesced_);
  coalesced_.clear();
  std::vector<at::Tensor> outputs;
  for (auto& w : works) {
    for (auto& t : w->outputs_) outputs.push_back(t);
  }
  auto end = c10::make_intrusive<WorkXCCL>(
      getRank(), c10d::OpType::COALESCED, "coalesced", seq_.load(), outputs,
      std::vector<at::Tensor>{}, nullptr, opTimeout(kNoTimeout), state_, blockingWait_, errorMode_);
  {
    std::lock_guard<std::mutex> g(state_->enqueueMu);
    xcclResult_t r = xcclGroupEnd();
    std::string detail = r != xcclSuccess ? xcclGetLastError(nullptr) : "";
    xcclEvent_t ev{};
    bool open = state_->use([&](xcclComm_t c) {
      if (r == xcclSuccess) {
        r = xcclEventRecord(&ev, c);
        if (r != xcclSuccess) detail = xcclGetLastError(nullptr);
      }
    });
    auto fail = [&](const std::string& m) {
      auto e = distError("xccl endCoalescing: " + m);
      for (auto& w : works) w->complete(e);
      std::rethrow_exception(e);
    };
    if (!open) fail(state_->reason());
    if (r != xcclSuccess) fail(libError(r, detail.c_str()));
    for (auto& w : works) w->setEvent(ev);
    end->setEvent(ev);
  }
  works.push_back(end);
  enqueueForCompletion(works);
  return end;
}

c10::intrusive_ptr<c10d::Backend> createProcessGroupXCCL(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& groupName,
    const std::vector<uint64_t>& globalRanks) {
  auto opts = c10::make_intrusive<ProcessGroupXCCL::Options>(timeout);
  opts->group_name = groupName;
  opts->global_ranks_in_group = globalRanks;
  return c10::make_intrusive<ProcessGroupXCCL>(store, rank, size, opts);
}

}  // namespace torch_xccl
