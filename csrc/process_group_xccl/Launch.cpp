// Launch.cpp — how an operation reaches libxccl once a collective checked and staged it:
// launch() picks the communicator and makes the Work (prepare), then runs the operation in
// one of three ways: on the calling thread (runOnCaller), on a device's communication stream
// (runOnStream), or asynchronously on the host communicator (runAsync). Coalescing blocks
// (startCoalescing .. endCoalescing) gather the last two under one event.
#include <algorithm>
#include <optional>

#include <ATen/record_function.h>
#include <c10/core/StreamGuard.h>

#include "FlightRecorder.hpp"
#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

namespace {
// What one enqueue on a communicator gave: open is false when the communicator was closed
// (nothing ran); otherwise r, libxccl's error text, and the event when one was asked for.
struct Enqueued {
  bool open = false;
  xcclResult_t r = xcclSuccess;
  std::string detail;
  xcclEvent_t ev{};
};

// Runs `enqueue` under the communicator's shared lock and, when it was accepted and
// recordEvent is set, records the event the Work completes on. start (may be null): an
// event recorded just before the enqueue (TORCH_XCCL_ENABLE_TIMING).
Enqueued enqueueOn(CommState& state, Target target, const Enqueue& enqueue, bool recordEvent,
                   std::optional<xcclEvent_t>* start = nullptr) {
  Enqueued e;
  e.open = state.use([&](xcclComm_t c) {
    target.comm = c;
    if (start != nullptr) {
      xcclEvent_t ev{};
      if (xcclEventRecord(&ev, c) == xcclSuccess) *start = ev;
    }
    e.r = enqueue(target);
    if (e.r != xcclSuccess) {
      e.detail = callError(c);
      return;
    }
    if (recordEvent) {
      e.r = xcclEventRecord(&e.ev, c);
      if (e.r != xcclSuccess) e.detail = xcclGetLastError(nullptr);
    }
  });
  return e;
}

bool isCollective(c10d::OpType t) {
  return t != c10d::OpType::SEND && t != c10d::OpType::RECV && t != c10d::OpType::RECVANYSOURCE &&
         t != c10d::OpType::BARRIER;
}

// Whether any of n values has its magnitude bits (value & mask) above `inf`'s: a NaN in the
// IEEE layouts (and e5m2); in blocks, each a branch-free loop the compiler vectorizes. The
// extensions build at -O2, where GCC 12 leaves this loop scalar (178 us per MiB of float32
// here, 37 us vectorized).
#if defined(__GNUC__) && !defined(__clang__)
#define XCCL_VECTORIZE __attribute__((optimize("tree-vectorize")))
#else
#define XCCL_VECTORIZE
#endif
template <typename U>
XCCL_VECTORIZE bool anyAbove(const void* data, size_t n, U mask, U inf) {
  const U* p = static_cast<const U*>(data);
  constexpr size_t kBlock = 4096;
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t end = std::min(n, at + kBlock);
    U hit = 0;
    for (size_t i = at; i < end; ++i) hit |= static_cast<U>((p[i] & mask) > inf);
    if (hit != 0) return true;
  }
  return false;
}

// cpu tensors are scanned in place (about memory speed: 1 MiB of float32 in tens of
// microseconds, where at::isnan(t).any() writes and reads a mask, several times slower);
// device tensors through torch's isnan on their device.
bool hasNan(const at::Tensor& t) {
  const at::ScalarType st = t.scalar_type();
  if (!at::isFloatingType(st) && !at::isComplexType(st)) return false;
  if (t.numel() == 0) return false;
  if (t.device().is_cpu()) {
    const at::Tensor c = t.contiguous();
    const size_t n = static_cast<size_t>(c.numel()) * (at::isComplexType(st) ? 2 : 1);
    const void* d = c.const_data_ptr();
    switch (st) {
      case at::kFloat:
      case at::kComplexFloat:
        return anyAbove<uint32_t>(d, n, 0x7fffffffU, 0x7f800000U);
      case at::kDouble:
      case at::kComplexDouble:
        return anyAbove<uint64_t>(d, n, 0x7fffffffffffffffULL, 0x7ff0000000000000ULL);
      case at::kHalf:
      case at::kComplexHalf:
        return anyAbove<uint16_t>(d, n, 0x7fff, 0x7c00);
      case at::kBFloat16:
        return anyAbove<uint16_t>(d, n, 0x7fff, 0x7f80);
      case at::kFloat8_e5m2:
        return anyAbove<uint8_t>(d, n, 0x7f, 0x7c);
      case at::kFloat8_e4m3fn:  // no infinities: S.1111.111 is the NaN
        return anyAbove<uint8_t>(d, n, 0x7f, 0x7e);
      default:
        break;
    }
  }
  // The 8-bit floats have no isnan kernel: widened first (a NaN stays a NaN).
  const at::Tensor v = t.element_size() == 1 ? t.to(at::kFloat) : t;
  return at::isnan(v).any().item<bool>();
}
}  // namespace

namespace {
// Blocks open by startCoalescing on this thread, over every group. libxccl's group is per
// thread: an operation of another group made while one is open would be recorded into it, not
// run, and a blocking one would return its output unreduced.
thread_local int tlsOpenBlocks = 0;
}  // namespace

void noteCoalescingBlock(bool opened) {
  // A block ended on another thread than it began (a shrink's abandon) leaves this one's
  // count, and libxccl's group on the thread that began it, as they were.
  if (opened) {
    ++tlsOpenBlocks;
  } else if (tlsOpenBlocks > 0) {
    --tlsOpenBlocks;
  }
}

int coalescingBlocksOnThisThread() { return tlsOpenBlocks; }

void ProcessGroupXCCL::checkNan(const Op& op) {
  bool mine = false;
  if (op.extra.root < 0 || op.extra.root == getRank()) {
    for (const auto& t : op.inputs) mine = mine || hasNan(t);
  }
  int32_t first = mine ? getRank() : INT32_MAX;
  xcclResult_t r = xcclSuccess;
  std::string detail;
  const bool open = state_->use([&](xcclComm_t c) {
    r = xcclAllReduce(&first, &first, 1, xcclInt32, xcclMin, c, XCCL_STREAM_CALLER);
    if (r != xcclSuccess) detail = xcclGetLastError(c);
  });
  if (!open) throwDist(std::string("xccl ") + op.name + ": " + state_->reason());
  if (r != xcclSuccess) {
    throwDist(std::string("xccl ") + op.name +
              ": the NaN check (TORCH_XCCL_NAN_CHECK=1) failed: " + libError(r, detail.c_str()));
  }
  if (first != INT32_MAX) {
    throwDist(std::string("xccl ") + op.name + ": rank " + std::to_string(first) + " of group '" +
              state_->name + "' fed a NaN" + (first == getRank() ? " (this rank)" : "") +
              " (the lowest rank that did; TORCH_XCCL_NAN_CHECK=1): the collective did not run "
              "on any rank");
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::launch(Op op) {
  try {
    TORCH_CHECK(coalescing_ || tlsOpenBlocks == 0, "xccl ", op.name,
                ": a coalescing block of another group is open on this thread; libxccl's group "
                "is per thread, so the operation would be recorded into that block instead of "
                "running (a blocking call would return its output unreduced): end the block "
                "first, or make the call on another thread");
    if (nanCheck_ && !coalescing_ && isCollective(op.type)) checkNan(op);
    Launch l = prepare(op);
    if (isAccelerator(l.device)) return runOnStream(op, l);
    // A blocking collective on the host communicator runs on this thread
    // (XCCL_STREAM_CALLER): torch waits for it at once anyway, and the hand-off to libxccl's
    // progress thread and back was most of a small collective's time. The Work is complete
    // when launch returns.
    if (op.extra.callerWaits && runOnCaller_ && !coalescing_ && !state_->desync) {
      return runOnCaller(op, l);
    }
    return runAsync(op, l);
  } catch (...) {
    // torch does not end a coalescing block whose operation raised: end it here, or the
    // thread's libxccl group stays open and every later call of this thread, on any group,
    // would only be recorded (an output never reduced, read as a result).
    if (coalescing_) abandonCoalescing("an operation of the block raised");
    throw;
  }
}

ProcessGroupXCCL::Launch ProcessGroupXCCL::prepare(Op& op) {
  Launch l;
  l.device = deviceOf(op.name, op.outputs, op.keepAlive, op.extra);
  const bool onDev = isAccelerator(l.device);
  if (coalescing_ && coalescedComm_) {
    TORCH_CHECK(coalescedComm_->device == l.device, "xccl ", op.name,
                ": every operation of a coalescing block must be on one device; the block "
                "started on ",
                coalescedComm_->device, ", this one is on ", l.device);
    l.dc = coalescedComm_;
  } else {
    l.dc = onDev ? commFor(op.name, l.device) : host_;
    if (coalescing_) coalescedComm_ = l.dc;
  }
  if (state_->desync) {
    l.issued = describeCall(op.name, op.keepAlive.empty() ? op.outputs : op.keepAlive);
  }
  if (onDev) {
    // Memory safety comes from recordStream (below), as with NCCL: the Work does not hold
    // the inputs and staging buffers, so the allocator test in the suite can catch a miss.
    for (const auto& t : op.outputs) recordStream(t, *l.dc->stream);
    for (const auto& t : op.keepAlive) {
      // a contiguous output is its own staging buffer: recorded once
      bool isOutput = std::any_of(op.outputs.begin(), op.outputs.end(),
                                  [&](const at::Tensor& o) { return o.is_same(t); });
      if (!isOutput) recordStream(t, *l.dc->stream);
    }
    op.keepAlive.clear();
  }
  // A barrier, and a receive whose source the caller asks for, block the host in wait().
  const bool hostBlocking =
      op.type == c10d::OpType::BARRIER || op.type == c10d::OpType::RECVANYSOURCE;
  // On a device the post step is queued on the stream (runOnStream); on the host the Work
  // runs it when it completes.
  l.work = c10::make_intrusive<WorkXCCL>(
      getRank(), op.type, op.name, seq_.load() + 1, std::move(op.outputs), std::move(op.keepAlive),
      onDev ? nullptr : std::move(op.post), opTimeout(op.timeout), l.dc->state, blockingWait_,
      errorMode_, l.dc->stream, onDev && hostBlocking);
  if (op.extra.peerSlot != nullptr) {
    *op.extra.peerSlot = l.work->peerSlot();
    l.work->setPeerIsOutput(true);
  }
  l.p2p = op.type == c10d::OpType::SEND || op.type == c10d::OpType::RECV ||
          op.type == c10d::OpType::RECVANYSOURCE;
  return l;
}

// Every rank of the group numbers the group's collectives alike (point-to-point apart), so
// the desync report and the flight recorder can line the ranks up. Under enqueueMu.
void ProcessGroupXCCL::numberAndRecord(const Op& op, Launch& l) {
  const uint64_t opSeq = seq_.fetch_add(1) + 1;
  const uint64_t number = l.p2p ? ++p2pSeq_ : ++collSeq_;
  WorkXCCL& w = *l.work;
  if (state_->desync && !l.p2p) {
    w.collSeq_ = number;
    state_->desync->recordIssued(number, l.issued);
  }
  w.flightId_ =
      FlightRecorder::get().record({flightGroup_, isAccelerator(l.device), l.p2p, number, opSeq,
                                    op.name, l.device, w.timeout_.count(), op.inputs, w.outputs_});
}

// Undoes numberAndRecord for an operation that never ran. Under enqueueMu.
void ProcessGroupXCCL::takeBack(Launch& l, const std::string& why) {
  seq_.fetch_sub(1);
  --(l.p2p ? p2pSeq_ : collSeq_);
  FlightRecorder::get().retire(l.work->flightId_, distError(why), false);
}

// The operation runs to its end inside xcclX (XCCL_STREAM_CALLER), so it is numbered and
// recorded before it runs, and taken back when libxccl refuses it.
c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::runOnCaller(const Op& op, Launch& l) {
  std::exception_ptr failed;
  {
    std::lock_guard<std::mutex> g(l.dc->state->enqueueMu);
    numberAndRecord(op, l);
    Target target;
    target.stream = XCCL_STREAM_CALLER;
    const auto t0 =
        timing_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    Enqueued e = enqueueOn(*l.dc->state, target, op.enqueue, /*recordEvent=*/false);
    if (timing_) l.work->callerTimes_.emplace(t0, std::chrono::steady_clock::now());
    if (!e.open) {
      const std::string why = std::string("xccl ") + op.name + ": " + l.dc->state->reason();
      takeBack(l, why);
      throwDist(why);
    }
    if (e.r != xcclSuccess && e.r != xcclInvalidArgument && e.r != xcclInvalidUsage) {
      // The operation ran and failed: as when the completion thread finds a failed Work, the
      // Work carries the error (torch's wait() raises it) and the group's error handling runs
      // (below, outside the communicator's locks).
      auto err = l.work->makeError(e.r, "operation failed: " + e.detail);
      l.work->complete(err);
      failed = err;
    } else if (e.r != xcclSuccess) {
      const std::string why =
          std::string("xccl ") + op.name + ": " + libError(e.r, e.detail.c_str());
      takeBack(l, why);
      throwDist(why);
    } else {
      l.work->complete(nullptr);  // the copy-backs, then done
    }
  }
  if (failed) handleAsyncError(failed);
  return l.work;
}

// The communication stream starts after the work queued so far on the caller's stream; the
// operation, its post step and the end event are queued on it.
//
// Under torch's profiler the operation is a range of its own ("xccl:allreduce"), opened with
// the communication stream current: with use_device="xdev" (XdevProfiler.cpp) its device
// time is what the stream spent on it, up to the end event. The op torch records around the
// call (c10d::allreduce_) only brackets the enqueue on the caller's stream. Not profiling,
// the range costs a flag test.
c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::runOnStream(Op& op, Launch& l) {
  {
    std::lock_guard<std::mutex> g(l.dc->state->enqueueMu);
    l.dc->ready->record(currentStream(l.device));
    c10::StreamGuard onComm(*l.dc->stream);
    RECORD_FUNCTION(std::string("xccl:") + op.name, std::vector<c10::IValue>());
    l.dc->ready->block(*l.dc->stream);
    if (timing_) {
      auto start = std::make_shared<DeviceEvent>(l.device, /*timing=*/true);
      start->record(*l.dc->stream);
      if (!coalescing_) {
        l.work->startOnDevice_ = std::move(start);
      } else if (!coalescedStartOnDevice_) {
        coalescedStartOnDevice_ = std::move(start);  // the block's first device operation
      }
    }
    Target target;
    target.stream = nativeStream(*l.dc->stream);
    if (!enqueueAndRecord(op, l, target)) {
      if (op.post) coalescedPosts_.push_back(std::move(op.post));  // queued after the block
      return l.work;
    }
    finishOnStream({l.work}, *l.dc->stream, op.post);
  }
  enqueueForCompletion({l.work});
  return l.work;
}

// libxccl's progress thread runs it; the Work completes on its event, in wait() or on the
// completion thread, whichever sees it first.
c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::runAsync(const Op& op, Launch& l) {
  {
    std::lock_guard<std::mutex> g(l.dc->state->enqueueMu);
    if (!enqueueAndRecord(op, l, Target{})) return l.work;
  }
  enqueueForCompletion({l.work});
  return l.work;
}

// Numbered and recorded once libxccl accepted the operation: a refusal throws with nothing
// to take back.
bool ProcessGroupXCCL::enqueueAndRecord(const Op& op, Launch& l, const Target& target) {
  // Host operations are timed between libxccl events (device ones by their stream events).
  const bool timeOnHost = timing_ && !coalescing_ && !isAccelerator(l.device);
  Enqueued e = enqueueOn(*l.dc->state, target, op.enqueue, /*recordEvent=*/!coalescing_,
                         timeOnHost ? &l.work->startEvent_ : nullptr);
  if (!e.open) throwDist(std::string("xccl ") + op.name + ": " + l.dc->state->reason());
  if (e.r != xcclSuccess) {
    throwDist(std::string("xccl ") + op.name + ": " + libError(e.r, e.detail.c_str()));
  }
  numberAndRecord(op, l);
  if (coalescing_) {
    coalesced_.push_back(l.work);
    return false;
  }
  l.work->setEvent(e.ev);
  return true;
}

// Device operations, once enqueued: the post step (copy-backs) is queued on the communication
// stream, then the end event every Work of the launch completes with, then their futures.
void ProcessGroupXCCL::finishOnStream(const std::vector<c10::intrusive_ptr<WorkXCCL>>& works,
                                      const c10::Stream& stream,
                                      const std::function<void()>& post) {
  c10::StreamGuard onComm(stream);
  if (post) post();
  auto end = std::make_shared<DeviceEvent>(stream.device(), timing_);
  end->record(stream);
  for (const auto& w : works) w->setEnd(end);
}

// ---------------------------------------------------------------- coalescing

// Ends a block torch will not end (an operation in it raised, or the group is being shrunk
// with it open): the thread's libxccl group is discarded, nothing it recorded runs (a send
// of a failed batch would otherwise wait for a receive its peer never posted, ahead of every
// later operation), and the block's Works fail with `why`.
void ProcessGroupXCCL::abandonCoalescing(const std::string& why) {
  if (coalescing_) noteCoalescingBlock(false);
  coalescing_ = false;
  xcclGroupDiscard();
  auto e = distError("xccl: coalescing block abandoned: " + why);
  for (auto& w : coalesced_) w->complete(e);
  coalesced_.clear();
  coalescedComm_.reset();
  coalescedPosts_.clear();
}

void ProcessGroupXCCL::startCoalescing() {
  // A block whose operation raised before reaching launch (a bad argument) was left open.
  if (coalescing_) abandonCoalescing("a new block started before it ended");
  coalescedStart_.reset();
  coalescedStartOnDevice_.reset();
  if (timing_) {  // before the group opens: an event inside it would be refused
    state_->use([&](xcclComm_t c) {
      xcclEvent_t ev{};
      if (xcclEventRecord(&ev, c) == xcclSuccess) coalescedStart_ = ev;
    });
  }
  xcclResult_t r = xcclGroupStart();
  if (r != xcclSuccess)
    throwDist("xccl startCoalescing: " + libError(r, xcclGetLastError(nullptr)));
  coalescing_ = true;
  noteCoalescingBlock(true);
  coalescedComm_.reset();
  coalescedPosts_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::endCoalescing() {
  TORCH_CHECK(coalescing_, "xccl endCoalescing: no coalescing block was started");
  coalescing_ = false;
  noteCoalescingBlock(false);
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
  if (timing_) {
    if (dc->stream) {
      end->startOnDevice_ = std::move(coalescedStartOnDevice_);
    } else {
      end->startEvent_ = coalescedStart_;
    }
  }
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

}  // namespace torch_xccl
