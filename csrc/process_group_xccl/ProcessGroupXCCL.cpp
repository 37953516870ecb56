// ProcessGroupXCCL.cpp — the backend itself: construction (communicator rendezvous through
// the c10d Store), launching an operation (enqueue, event, Work), the completion thread,
// coalescing, introspection and the factory. The collectives are in Collectives.cpp, the
// Python module in Bindings.cpp.
#include "ProcessGroupXCCL.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <c10/core/StreamGuard.h>

#include "FlightDump.hpp"
#include "FlightRecorder.hpp"
#include "Rendezvous.hpp"
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
      errorMode_(errorModeFromEnv()),
      runOnCaller_(envKnob("TORCH_XCCL_RUN_ON_CALLER", 1, 0, 1) != 0) {
  TORCH_CHECK(store_, "xccl init: no store");
  TORCH_CHECK(size > 0 && rank >= 0 && rank < size, "xccl init: invalid rank ", rank,
              " for group size ", size);
  state_->rank = rank;
  state_->size = size;
  state_->name = options_->group_name.empty() ? std::string("default") : options_->group_name;

  StoreCtx ctx{store_};
  // torch's prefix for this group repeats across initialisations (destroy_process_group +
  // init_process_group, torchrun restarts): everything below writes under a scope of this
  // initialisation instead (Rendezvous.hpp).
  store_ = scopeToInitialisation(store_, size, ctx.callTimeoutMs, &storeScope_);
  ctx.store = store_;
  xcclStore_t s{&ctx, &storeSet, &storeGet};
  xcclConfig_t cfg{};
  cfg.timeout_ms = options_->timeout.count() > 0 ? options_->timeout.count() : 0;
  cfg.device = -1;
  cfg.deviceType = xcclDeviceHost;  // cpu tensors, whatever XCCL_DEVICE says
  cfg.name = state_->name.c_str();
  xcclComm_t comm = nullptr;
  // store_ is this group's and this initialisation's (above), so one fixed prefix suffices.
  xcclResult_t r = xcclCommInitRankStore(&comm, size, rank, &s, "xccl/", &cfg);
  if (r != xcclSuccess) {
    throwDist("xccl init: rank " + std::to_string(rank) + " of " + std::to_string(size) +
              " (group '" + state_->name + "'): " + libError(r, xcclGetLastError(nullptr)));
  }
  state_->comm = comm;
  state_->desync = DesyncDebugger::fromEnv(store_, rank, size);
  flightGroup_ =
      flight::addGroup(state_->name, rank, size, options_->global_ranks_in_group, store_);
  host_ = std::make_shared<DeviceComm>();
  host_->state = state_;
  completion_ = std::thread([this] { completionLoop(); });
  std::lock_guard<std::mutex> g(liveMu());
  liveBackends().insert(this);
}

std::mutex& ProcessGroupXCCL::liveMu() {
  static std::mutex mu;
  return mu;
}

std::set<ProcessGroupXCCL*>& ProcessGroupXCCL::liveBackends() {
  static auto* live = new std::set<ProcessGroupXCCL*>();  // outlives every backend
  return *live;
}

// Why the completion threads must end before Python finalizes: they release the Works they
// complete, and a Work's tensors may own their Python objects (torch keeps a tensor's
// PyObject alive with the TensorImpl), so the last release takes the GIL. Once Python is
// finalizing, a thread that asks for the GIL is ended with pthread_exit, whose unwinding
// through a destructor (noexcept) calls std::terminate: "terminate called without an active
// exception", SIGABRT at the very end of a program that did not destroy its process groups
// (the transformers Trainer, accelerate, DeepSpeed and most scripts do not). torch_xccl
// registers this with atexit, which runs while Python still runs; the caller releases the
// GIL, so a completion thread finishing a release meanwhile gets it. Works still queued are
// not waited for: they are released with their backend, on the thread that destroys it.
void ProcessGroupXCCL::stopCompletionThreadsBeforeExit() {
  // Held throughout, so no backend is destroyed (its destructor takes it first) while its
  // thread is joined here; the completion threads never take it.
  std::lock_guard<std::mutex> g(liveMu());
  for (auto* pg : liveBackends()) {
    std::lock_guard<std::mutex> q(pg->cq_->mu);
    pg->cq_->exiting = true;
  }
  for (auto* pg : liveBackends()) {
    pg->cq_->cv.notify_all();
    std::lock_guard<std::mutex> j(pg->completionJoinMu_);
    if (pg->completion_.joinable()) pg->completion_.join();
  }
}

void ProcessGroupXCCL::stopCompletionThread() {
  {
    std::lock_guard<std::mutex> g(cq_->mu);
    cq_->stop = true;
  }
  cq_->cv.notify_all();
  std::lock_guard<std::mutex> g(completionJoinMu_);
  if (completion_.joinable()) completion_.join();
}

ProcessGroupXCCL::~ProcessGroupXCCL() {
  {
    std::lock_guard<std::mutex> g(liveMu());
    liveBackends().erase(this);
  }
  stopCompletionThread();
  for (auto& c : allComms()) c->close("process group destroyed", /*destroy=*/true);
}

void ProcessGroupXCCL::shutdown() {
  // Drain: the completion thread finishes what was enqueued (bounded by the op timeouts),
  // then the communicators are destroyed.
  stopCompletionThread();
  for (auto& c : allComms()) c->close("process group was shut down", /*destroy=*/true);
}

void ProcessGroupXCCL::abort() {
  flight::aborted(state_->name);
  abortComm("process group was aborted");
}

// One failure fails the group: every communicator of it is aborted, so peers blocked on any
// of them fail at once too.
void ProcessGroupXCCL::abortComm(const std::string& reason) {
  for (auto& c : allComms()) c->close(reason, false);
}

std::chrono::milliseconds ProcessGroupXCCL::opTimeout(std::chrono::milliseconds requested) const {
  if (requested.count() > 0) return requested;
  return options_->timeout.count() > 0 ? options_->timeout : kBackendDefaultTimeout;
}

std::string ProcessGroupXCCL::describe() const {
  std::ostringstream os;
  os << "ProcessGroupXCCL(rank=" << getRank() << ", size=" << getSize() << ", group='"
     << state_->name << "', timeout_ms=" << options_->timeout.count()
     << ", blocking_wait=" << blockingWait_
     << ", async_error_handling=" << static_cast<int>(errorMode_) << ", store_scope='"
     << storeScope_ << "')";
  return os.str();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::launch(const char* opName, c10d::OpType type,
                                                        c10::ArrayRef<at::Tensor> inputs,
                                                        std::chrono::milliseconds timeout,
                                                        std::vector<at::Tensor> outputs,
                                                        std::vector<at::Tensor> keepAlive,
                                                        std::function<void()> post,
                                                        const Enqueue& enqueue, LaunchExtra extra) {
  const c10::Device device = deviceOf(opName, outputs, keepAlive, extra);
  const bool onDev = isAccelerator(device);
  std::shared_ptr<DeviceComm> dc;
  if (coalescing_ && coalescedComm_) {
    TORCH_CHECK(coalescedComm_->device == device, "xccl ", opName,
                ": every operation of a coalescing block must be on one device; the block "
                "started on ",
                coalescedComm_->device, ", this one is on ", device);
    dc = coalescedComm_;
  } else {
    dc = onDev ? commFor(opName, device) : host_;
    if (coalescing_) coalescedComm_ = dc;
  }
  const std::string issued =
      state_->desync ? describeCall(opName, keepAlive.empty() ? outputs : keepAlive) : "";
  if (onDev) {
    // Memory safety comes from recordStream (below), as with NCCL: the Work does not hold
    // the inputs and staging buffers, so the allocator test in the suite can catch a miss.
    for (const auto& t : outputs) recordStream(t, *dc->stream);
    for (const auto& t : keepAlive) {
      // a contiguous output is its own staging buffer: recorded once
      bool isOutput = std::any_of(outputs.begin(), outputs.end(),
                                  [&](const at::Tensor& o) { return o.is_same(t); });
      if (!isOutput) recordStream(t, *dc->stream);
    }
    keepAlive.clear();
  }
  // A barrier, and a receive whose source the caller asks for, block the host in wait().
  const bool hostBlocking = type == c10d::OpType::BARRIER || type == c10d::OpType::RECVANYSOURCE;
  // A blocking collective on the host communicator runs on this thread (XCCL_STREAM_CALLER):
  // torch waits for it at once anyway, and the hand-off to libxccl's progress thread and
  // back was most of a small collective's time. The Work is complete when launch returns.
  const bool onCaller =
      extra.callerWaits && runOnCaller_ && !onDev && !coalescing_ && !state_->desync;
  auto work = c10::make_intrusive<WorkXCCL>(
      getRank(), type, opName, seq_.load() + 1, std::move(outputs), std::move(keepAlive),
      onDev ? nullptr : std::move(post), opTimeout(timeout), dc->state, blockingWait_, errorMode_,
      dc->stream, onDev && hostBlocking);
  if (extra.peerSlot != nullptr) {
    *extra.peerSlot = work->peerSlot();
    work->setPeerIsOutput(true);
  }
  std::optional<std::pair<std::exception_ptr, std::string>> failedOnCaller;
  {
    std::lock_guard<std::mutex> g(dc->state->enqueueMu);
    Target target;
    if (onDev) {
      // The communication stream starts after the work queued so far on the caller's stream.
      dc->ready->record(currentStream(device));
      dc->ready->block(*dc->stream);
      target.stream = nativeStream(*dc->stream);
    }
    if (onCaller) target.stream = XCCL_STREAM_CALLER;
    // Number and record the operation (every rank of the group numbers the group's
    // collectives alike, point-to-point apart): once libxccl accepted it, or, on the caller,
    // before it runs, since it is done when enqueue returns (a refusal takes it back).
    const bool p2p = type == c10d::OpType::SEND || type == c10d::OpType::RECV ||
                     type == c10d::OpType::RECVANYSOURCE;
    auto numberAndRecord = [&] {
      const uint64_t opSeq = seq_.fetch_add(1) + 1;
      const uint64_t number = p2p ? ++p2pSeq_ : ++collSeq_;
      if (state_->desync && !p2p) {
        work->collSeq_ = number;
        state_->desync->recordIssued(number, issued);
      }
      work->flightId_ =
          FlightRecorder::get().record({flightGroup_, onDev, p2p, number, opSeq, opName, device,
                                        work->timeout_.count(), inputs, work->outputs_});
    };
    auto takeBack = [&](const std::string& why) {
      seq_.fetch_sub(1);
      --(p2p ? p2pSeq_ : collSeq_);
      FlightRecorder::get().retire(work->flightId_, distError(why), false);
    };
    if (onCaller) numberAndRecord();
    xcclResult_t r = xcclSuccess;
    std::string detail;
    xcclEvent_t ev{};
    bool open = dc->state->use([&](xcclComm_t c) {
      target.comm = c;
      r = enqueue(target);
      if (r != xcclSuccess) {
        detail = xcclGetLastError(nullptr);
        if (detail.empty()) detail = xcclGetLastError(c);
        return;
      }
      if (!coalescing_ && !onCaller) {
        r = xcclEventRecord(&ev, c);
        if (r != xcclSuccess) detail = xcclGetLastError(nullptr);
      }
    });
    if (!open) {
      const std::string why = std::string("xccl ") + opName + ": " + dc->state->reason();
      if (onCaller) takeBack(why);
      throwDist(why);
    }
    if (onCaller && r != xcclSuccess && r != xcclInvalidArgument && r != xcclInvalidUsage) {
      // The operation ran and failed: as when the completion thread finds a failed Work, the
      // Work carries the error (torch's wait() raises it) and the group's error handling runs
      // (below, outside the communicator's locks).
      auto err = work->makeError(r, "operation failed: " + detail);
      work->complete(err);
      failedOnCaller = std::make_pair(err, detail);
    } else if (r != xcclSuccess) {
      const std::string why = std::string("xccl ") + opName + ": " + libError(r, detail.c_str());
      if (onCaller) takeBack(why);
      throwDist(why);
    } else if (onCaller) {
      work->complete(nullptr);  // the copy-backs, then done
    }
    if (!onCaller) {
      numberAndRecord();
      if (coalescing_) {
        coalesced_.push_back(work);
        if (onDev && post) coalescedPosts_.push_back(std::move(post));
        return work;
      }
      work->setEvent(ev);
      if (onDev) finishOnStream({work}, *dc->stream, post);
    }
  }
  if (onCaller) {
    if (failedOnCaller) handleAsyncError(*work, failedOnCaller->first, failedOnCaller->second);
    return work;
  }
  enqueueForCompletion({work});
  return work;
}

// Device operations, once enqueued: the post step (copy-backs) is queued on the communication
// stream, then the end event every Work of the launch completes with, then their futures.
void ProcessGroupXCCL::finishOnStream(const std::vector<c10::intrusive_ptr<WorkXCCL>>& works,
                                      const c10::Stream& stream,
                                      const std::function<void()>& post) {
  c10::StreamGuard onComm(stream);
  if (post) post();
  auto end = std::make_shared<DeviceEvent>(stream.device());
  end->record(stream);
  for (const auto& w : works) w->setEnd(end);
}

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
  coalescedComm_.reset();
  coalescedPosts_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::endCoalescing() {
  TORCH_CHECK(coalescing_, "xccl endCoalescing: no coalescing block was started");
  coalescing_ = false;
  auto works = std::move(coalesced_);
  coalesced_.clear();
  auto posts = std::move(coalescedPosts_);
  coalescedPosts_.clear();
  std::shared_ptr<DeviceComm> dc = coalescedComm_ ? coalescedComm_ : host_;
  coalescedComm_.reset();
  std::vector<at::Tensor> outputs;
  for (auto& w : works) {
    for (auto& t : w->outputs_) outputs.push_back(t);
  }
  auto end = c10::make_intrusive<WorkXCCL>(getRank(), c10d::OpType::COALESCED, "coalesced",
                                           seq_.load(), outputs, std::vector<at::Tensor>{}, nullptr,
                                           opTimeout(kNoTimeout), dc->state, blockingWait_,
                                           errorMode_, dc->stream);
  works.push_back(end);
  {
    std::lock_guard<std::mutex> g(dc->state->enqueueMu);
    xcclResult_t r = xcclGroupEnd();
    std::string detail = r != xcclSuccess ? xcclGetLastError(nullptr) : "";
    xcclEvent_t ev{};
    bool open = dc->state->use([&](xcclComm_t c) {
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
    if (!open) fail(dc->state->reason());
    if (r != xcclSuccess) fail(libError(r, detail.c_str()));
    for (auto& w : works) w->setEvent(ev);
    if (dc->stream) {
      finishOnStream(works, *dc->stream, [&posts] {
        for (auto& p : posts) p();
      });
    }
  }
  enqueueForCompletion(works);
  return end;
}

c10::intrusive_ptr<ProcessGroupXCCL> createProcessGroupXCCL(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& groupName,
    const std::vector<uint64_t>& globalRanks) {
  auto opts = c10::make_intrusive<ProcessGroupXCCL::Options>(timeout);
  opts->group_name = groupName;
  opts->global_ranks_in_group = globalRanks;
  return c10::make_intrusive<ProcessGroupXCCL>(store, rank, size, opts);
}

}  // namespace torch_xccl
