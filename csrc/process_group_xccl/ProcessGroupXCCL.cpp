// ProcessGroupXCCL.cpp — the whole torch-facing side of torch_xccl in one translation unit
// (torch headers are slow to compile): the Store adapter, WorkXCCL, ProcessGroupXCCL and the
// pybind11 module torch_xccl._C.
#include "ProcessGroupXCCL.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <pybind11/chrono.h>
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace torch_xccl {
namespace {

constexpr int64_t kPollMs = 100;  // longest single xcclEventWait slice

// ---------------------------------------------------------------- environment knobs
// Every knob is read when a process group is created, so tests can vary it per group.
int envInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  return std::atoi(v);
}
bool blockingWaitFromEnv() { return envInt("TORCH_XCCL_BLOCKING_WAIT", 0) != 0; }
AsyncErrorMode errorModeFromEnv() {
  int v = envInt("TORCH_XCCL_ASYNC_ERROR_HANDLING", 2);
  if (v < 0 || v > 3) v = 2;
  return static_cast<AsyncErrorMode>(v);
}

// ---------------------------------------------------------------- errors
std::exception_ptr distError(const std::string& msg) {
  try {
    C10_THROW_ERROR(DistBackendError, msg);
  } catch (...) {
    return std::current_exception();
  }
}
[[noreturn]] void throwDist(const std::string& msg) { C10_THROW_ERROR(DistBackendError, msg); }

std::string libError(xcclResult_t r, const char* detail) {
  std::string s = xcclGetErrorString(r);
  if (detail != nullptr && *detail != '\0') s += std::string(": ") + detail;
  return s;
}

// "allreduce(Float, 1048576)": the op and its first staged tensor, for the desync report.
std::string describeCall(const char* opName, const std::vector<at::Tensor>& tensors) {
  std::ostringstream os;
  os << opName << "(";
  if (!tensors.empty() && tensors[0].defined()) {
    os << tensors[0].scalar_type() << ", " << tensors[0].numel();
    if (tensors.size() > 1) os << ", +" << tensors.size() - 1 << " tensors";
  }
  os << ")";
  return os.str();
}

// ---------------------------------------------------------------- argument checks
xcclDataType_t toXcclType(const char* op, at::ScalarType t) {
  switch (t) {
    case at::kChar:
      return xcclInt8;
    case at::kByte:
      return xcclUint8;
    case at::kInt:
      return xcclInt32;
    case at::kLong:
      return xcclInt64;
    case at::kHalf:
      return xcclFloat16;
    case at::kFloat:
      return xcclFloat32;
    case at::kDouble:
      return xcclFloat64;
    case at::kBFloat16:
      return xcclBfloat16;
    case at::kBool:
      return xcclBool;
    default:
      TORCH_CHECK(false, "xccl ", op, ": unsupported dtype ", t,
                  " (supported: float32, float64, float16, bfloat16, int8, uint8, int32, int64, "
                  "bool)");
  }
}

bool isFloating(at::ScalarType t) {
  return t == at::kHalf || t == at::kFloat || t == at::kDouble || t == at::kBFloat16;
}

xcclRedOp_t toXcclOp(const char* op, const c10d::ReduceOp& r, at::ScalarType t) {
  switch (r.op_) {
    case c10d::ReduceOp::SUM:
      return t == at::kBool ? xcclMax : xcclSum;  // bool sum = or
    case c10d::ReduceOp::PRODUCT:
      return t == at::kBool ? xcclMin : xcclProd;  // = and
    case c10d::ReduceOp::MIN:
      return xcclMin;
    case c10d::ReduceOp::MAX:
      return xcclMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(t != at::kBool, "xccl ", op, ": ReduceOp.AVG is not supported for bool");
      return xcclAvg;
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK(isFloating(t), "xccl ", op,
                  ": ReduceOp.PREMUL_SUM needs a floating-point dtype, got ", t);
      return xcclPremulSum;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(!isFloating(t), "xccl ", op,
                  ": bitwise ReduceOp needs an integer or bool "
                  "dtype, got ",
                  t);
      return r.op_ == c10d::ReduceOp::BAND  ? xcclBand
             : r.op_ == c10d::ReduceOp::BOR ? xcclBor
                                            : xcclBxor;
    default:
      TORCH_CHECK(false, "xccl ", op, ": unsupported ReduceOp ", static_cast<int>(r.op_));
  }
}

// The PREMUL_SUM factor as a one-element CPU tensor of `dtype` (a host value of the type).
at::Tensor premulFactor(const char* op, const c10d::ReduceOp& r, at::ScalarType dtype) {
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(r.supplement_.get());
  TORCH_CHECK(s != nullptr, "xccl ", op, ": PREMUL_SUM without a factor");
  if (s->tensor_factor.defined()) {
    return s->tensor_factor.detach().to(at::kCPU, dtype).reshape({1}).contiguous();
  }
  return at::full({1}, s->double_factor, at::TensorOptions().dtype(dtype));
}

void checkTensor(const char* op, const at::Tensor& t, const char* what = "tensor") {
  TORCH_CHECK(t.defined(), "xccl ", op, ": ", what, " is undefined");
  TORCH_CHECK(t.layout() == at::kStrided, "xccl ", op, ": ", what,
              " must be a dense (strided) tensor, got layout ", t.layout());
  TORCH_CHECK(t.device().is_cpu(), "xccl ", op, ": tensors must be on the cpu device, got ",
              t.device());
  toXcclType(op, t.scalar_type());
}

// All tensors on one device and of one dtype.
void checkSame(const char* op, const at::Tensor& ref, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "xccl ", op, ": a tensor is undefined");
  TORCH_CHECK(t.device() == ref.device(), "xccl ", op, ": tensors must be on the same device, got ",
              ref.device(), " and ", t.device());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "xccl ", op,
              ": tensors must have the same dtype, got ", ref.scalar_type(), " and ",
              t.scalar_type());
}

const at::Tensor& single(const char* op, const std::vector<at::Tensor>& ts,
                         const char* what = "tensor") {
  TORCH_CHECK(ts.size() == 1, "xccl ", op, ": expected exactly one ", what,
              " per process (one device per rank), got ", ts.size());
  checkTensor(op, ts[0]);
  return ts[0];
}

void checkRank(const char* op, int64_t r, int size, const char* what) {
  TORCH_CHECK(r >= 0 && r < size, "xccl ", op, ": invalid ", what, " ", r, " (group size is ", size,
              ")");
}

void checkList(const char* op, const std::vector<at::Tensor>& list, const at::Tensor& ref, int size,
               const char* what) {
  TORCH_CHECK(static_cast<int>(list.size()) == size, "xccl ", op, ": ", what,
              " must hold one tensor per rank (", size, "), got ", list.size());
  for (const auto& t : list) {
    checkSame(op, ref, t);
    TORCH_CHECK(t.numel() == ref.numel(), "xccl ", op, ": every tensor in ", what, " must have ",
                ref.numel(), " elements (like the input), got ", t.numel());
  }
}

// A contiguous buffer for `t`: t itself, or a contiguous copy (copy back in the post step).
at::Tensor contig(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

// Post step that copies staged buffers back into the caller's tensors.
struct CopyBack {
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;  // (destination, staged source)
  void add(const at::Tensor& dst, const at::Tensor& src) {
    if (!dst.is_same(src)) pairs.emplace_back(dst, src);
  }
  std::function<void()> fn() {
    if (pairs.empty()) return nullptr;
    auto p = std::move(pairs);
    return [p]() {
      for (const auto& d : p) d.first.copy_(d.second.view(d.first.sizes()));
    };
  }
};

// Groups several enqueues into one (xcclGroupStart/End; nests inside a coalescing block).
xcclResult_t grouped(const std::function<xcclResult_t()>& body) {
  xcclResult_t r = xcclGroupStart();
  if (r != xcclSuccess) return r;
  xcclResult_t r1 = body();
  xcclResult_t r2 = xcclGroupEnd();
  return r1 != xcclSuccess ? r1 : r2;
}

// ---------------------------------------------------------------- store adapter
struct StoreCtx {
  c10::intrusive_ptr<c10d::Store> store;
};

int storeSet(void* ctx, const char* key, const void* value, size_t len) {
  try {
    auto* c = static_cast<StoreCtx*>(ctx);
    const auto* p = static_cast<const uint8_t*>(value);
    c->store->set(key, std::vector<uint8_t>(p, p + len));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[torch_xccl] store set(%s) failed: %s\n", key, e.what());
    return 1;
  }
}

int storeGet(void* ctx, const char* key, void* value, size_t cap, size_t* len, int64_t timeout_ms) {
  try {
    auto* c = static_cast<StoreCtx*>(ctx);
    if (timeout_ms > 0) {
      c->store->wait({key}, std::chrono::milliseconds(timeout_ms));
    } else {
      c->store->wait({key});
    }
    std::vector<uint8_t> v = c->store->get(key);
    *len = v.size();
    std::memcpy(value, v.data(), std::min(cap, v.size()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[torch_xccl] store get(%s) failed: %s\n", key, e.what());
    return 1;
  }
}

}  // namespace

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
      state_->desync->recordIssued(collSeq_, describeCall(opName, work->keepAlive_.empty() ? work->outputs_ : work->keepAlive_));
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

// ---------------------------------------------------------------- collectives

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, opts.rootRank, getSize(), "root rank");
  TORCH_CHECK(opts.rootTensor == 0, "xccl ", op, ": invalid root tensor ", opts.rootTensor);
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  int root = static_cast<int>(opts.rootRank);
  size_t n = buf.numel();
  return launch(op, c10d::OpType::BROADCAST, opts.timeout, {t}, {buf}, cb.fn(), [&] {
    return xcclBroadcast(buf.data_ptr(), buf.data_ptr(), n, dt, root, state_->comm, nullptr);
  });
}

namespace {
// One allreduce enqueue on a contiguous buffer; `factor` is the PREMUL_SUM scalar (or undefined).
xcclResult_t enqueueAllreduce(const char* op, const at::Tensor& buf, xcclRedOp_t xop,
                              const at::Tensor& factor, xcclComm_t comm) {
  auto dt = toXcclType(op, buf.scalar_type());
  if (xop == xcclPremulSum) {
    return xcclAllReducePremulSum(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt,
                                  factor.data_ptr(), comm, nullptr);
  }
  return xcclAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, xop, comm, nullptr);
}

// reduce / reduce_scatter have no premul variant: scale a copy, then SUM.
at::Tensor premulScaled(const char* op, const at::Tensor& input, const c10d::ReduceOp& rop) {
  at::Tensor f = premulFactor(op, rop, input.scalar_type());
  return (input.contiguous() * f).contiguous();
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  const at::Tensor& t = single(op, tensors);
  TORCH_CHECK(!opts.sparseIndices.has_value(), "xccl ", op, ": sparse allreduce is not supported");
  auto xop = toXcclOp(op, opts.reduceOp, t.scalar_type());
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  std::vector<at::Tensor> keep{buf};
  at::Tensor factor;
  if (xop == xcclPremulSum) {
    factor = premulFactor(op, opts.reduceOp, t.scalar_type());
    keep.push_back(factor);
  }
  return launch(op, c10d::OpType::ALLREDUCE, opts.timeout, {t}, keep, cb.fn(),
                [&] { return enqueueAllreduce(op, buf, xop, factor, state_->comm); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "xccl ", op, ": no tensors");
  for (const auto& t : tensors) {
    checkTensor(op, t);
    checkSame(op, tensors[0], t);
  }
  auto xop = toXcclOp(op, opts.reduceOp, tensors[0].scalar_type());
  std::vector<at::Tensor> bufs;
  CopyBack cb;
  for (const auto& t : tensors) {
    bufs.push_back(contig(t));
    cb.add(t, bufs.back());
  }
  std::vector<at::Tensor> keep = bufs;
  at::Tensor factor;
  if (xop == xcclPremulSum) {
    factor = premulFactor(op, opts.reduceOp, tensors[0].scalar_type());
    keep.push_back(factor);
  }
  return launch(op, c10d::OpType::ALLREDUCE_COALESCED, opts.timeout, tensors, keep, cb.fn(), [&] {
    return grouped([&] {
      for (const auto& b : bufs) {
        auto r = enqueueAllreduce(op, b, xop, factor, state_->comm);
        if (r != xcclSuccess) return r;
      }
      return xcclSuccess;
    });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, opts.rootRank, getSize(), "root rank");
  TORCH_CHECK(opts.rootTensor == 0, "xccl ", op, ": invalid root tensor ", opts.rootTensor);
  auto xop = toXcclOp(op, opts.reduceOp, t.scalar_type());
  at::Tensor buf = contig(t);
  at::Tensor send = buf;
  if (xop == xcclPremulSum) {
    send = premulScaled(op, t, opts.reduceOp);
    xop = xcclSum;
  }
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  int root = static_cast<int>(opts.rootRank);
  return launch(op, c10d::OpType::REDUCE, opts.timeout, {t}, {buf, send}, cb.fn(), [&] {
    return xcclReduce(send.data_ptr(), buf.data_ptr(), buf.numel(), dt, xop, root, state_->comm,
                      nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "_allgather_base";
  checkTensor(op, input, "input");
  checkTensor(op, output, "output");
  checkSame(op, input, output);
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "xccl ", op,
              ": output must have world_size * input elements (", input.numel() * getSize(),
              "), got ", output.numel());
  at::Tensor in = contig(input), out = contig(output);
  CopyBack cb;
  cb.add(output, out);
  auto dt = toXcclType(op, input.scalar_type());
  return launch(op, c10d::OpType::_ALLGATHER_BASE, opts.timeout, {output}, {in, out}, cb.fn(), [&] {
    return xcclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dt, state_->comm, nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  const at::Tensor& in0 = single(op, inputs, "input tensor");
  TORCH_CHECK(outputs.size() == 1, "xccl ", op, ": expected one output list, got ", outputs.size());
  checkList(op, outputs[0], in0, getSize(), "the output list");
  at::Tensor in = contig(in0);
  at::Tensor flat = at::empty({static_cast<int64_t>(getSize()) * in.numel()}, in.options());
  auto outs = outputs[0];
  auto dt = toXcclType(op, in.scalar_type());
  int64_t n = in.numel();
  std::function<void()> post = [outs, flat, n]() {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(outs[i].sizes()));
    }
  };
  return launch(op, c10d::OpType::ALLGATHER, opts.timeout, outs, {in, flat}, post, [&] {
    return xcclAllGather(in.data_ptr(), flat.data_ptr(), n, dt, state_->comm, nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  TORCH_CHECK(outputLists.size() == static_cast<size_t>(getSize()), "xccl ", op,
              ": expected one output list per rank (", getSize(), "), got ", outputLists.size());
  TORCH_CHECK(!inputs.empty(), "xccl ", op, ": no input tensors");
  for (const auto& t : inputs) {
    checkTensor(op, t);
    checkSame(op, inputs[0], t);
  }
  std::vector<at::Tensor> ins, flats, keep, outs;
  for (size_t j = 0; j < inputs.size(); ++j) {
    ins.push_back(contig(inputs[j]));
    flats.push_back(
        at::empty({static_cast<int64_t>(getSize()) * inputs[j].numel()}, inputs[j].options()));
  }
  for (auto& list : outputLists) {
    TORCH_CHECK(list.size() == inputs.size(), "xccl ", op,
                ": every output list must match the inputs (", inputs.size(), " tensors), got ",
                list.size());
    for (size_t j = 0; j < list.size(); ++j) {
      checkSame(op, inputs[0], list[j]);
      TORCH_CHECK(list[j].numel() == inputs[j].numel(), "xccl ", op, ": output tensor ", j,
                  " must have ", inputs[j].numel(), " elements, got ", list[j].numel());
      outs.push_back(list[j]);
    }
  }
  keep = ins;
  keep.insert(keep.end(), flats.begin(), flats.end());
  auto lists = outputLists;
  std::function<void()> post = [lists, flats]() {
    for (size_t r = 0; r < lists.size(); ++r) {
      for (size_t j = 0; j < lists[r].size(); ++j) {
        int64_t n = lists[r][j].numel();
        lists[r][j].copy_(
            flats[j].narrow(0, static_cast<int64_t>(r) * n, n).view(lists[r][j].sizes()));
      }
    }
  };
  return launch(op, c10d::OpType::ALLGATHER_COALESCED, opts.timeout, outs, keep, post, [&] {
    return grouped([&] {
      for (size_t j = 0; j < ins.size(); ++j) {
        auto r = xcclAllGather(ins[j].data_ptr(), flats[j].data_ptr(), ins[j].numel(),
                               toXcclType(op, ins[j].scalar_type()), state_->comm, nullptr);
        if (r != xcclSuccess) return r;
      }
      return xcclSuccess;
    });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size(), "xccl ", op, ": ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  std::vector<at::Tensor> ins, outs, keep;
  CopyBack cb;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(op, inputs[i], "input");
    checkTensor(op, outputs[i], "output");
    checkSame(op, inputs[i], outputs[i]);
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * getSize(), "xccl ", op, ": output ", i,
                " must have world_size * input elements (", inputs[i].numel() * getSize(),
                "), got ", outputs[i].numel());
    ins.push_back(contig(inputs[i]));
    outs.push_back(contig(outputs[i]));
    cb.add(outputs[i], outs.back());
  }
  keep = ins;
  keep.insert(keep.end(), outs.begin(), outs.end());
  return launch(op, c10d::OpType::COALESCED, opts.timeout, outputs, keep, cb.fn(), [&] {
    return grouped([&] {
      for (size_t i = 0; i < ins.size(); ++i) {
        auto r = xcclAllGather(ins[i].data_ptr(), outs[i].data_ptr(), ins[i].numel(),
                               toXcclType(op, ins[i].scalar_type()), state_->comm, nullptr);
        if (r != xcclSuccess) return r;
      }
      return xcclSuccess;
    });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const char* op = "gather";
  checkRank(op, opts.rootRank, getSize(), "root rank");
  const at::Tensor& in0 = single(op, inputs, "input tensor");
  bool isRoot = getRank() == opts.rootRank;
  at::Tensor in = contig(in0);
  int64_t n = in.numel();
  at::Tensor flat;
  std::vector<at::Tensor> outs;
  std::function<void()> post;
  if (isRoot) {
    TORCH_CHECK(outputs.size() == 1, "xccl ", op, ": the root expects one output list, got ",
                outputs.size());
    checkList(op, outputs[0], in0, getSize(), "the output list");
    outs = outputs[0];
    flat = at::empty({static_cast<int64_t>(getSize()) * n}, in.options());
    post = [outs, flat, n]() {
      for (size_t i = 0; i < outs.size(); ++i) {
        outs[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(outs[i].sizes()));
      }
    };
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "xccl ", op,
                ": only the root (rank ", opts.rootRank, ") may pass an output list");
  }
  auto dt = toXcclType(op, in.scalar_type());
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> keep{in};
  if (flat.defined()) keep.push_back(flat);
  return launch(op, c10d::OpType::GATHER, opts.timeout, outs, keep, post, [&] {
    return xcclGather(in.data_ptr(), isRoot ? flat.data_ptr() : nullptr, n, dt, root, state_->comm,
                      nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  checkRank(op, opts.rootRank, getSize(), "root rank");
  const at::Tensor& out0 = single(op, outputs, "output tensor");
  bool isRoot = getRank() == opts.rootRank;
  at::Tensor out = contig(out0);
  at::Tensor flat;
  if (isRoot) {
    TORCH_CHECK(inputs.size() == 1, "xccl ", op, ": the root expects one input list, got ",
                inputs.size());
    checkList(op, inputs[0], out0, getSize(), "the input list");
    std::vector<at::Tensor> parts;
    for (const auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
    flat = at::cat(parts).contiguous();
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "xccl ", op,
                ": only the root (rank ", opts.rootRank, ") may pass an input list");
  }
  CopyBack cb;
  cb.add(out0, out);
  auto dt = toXcclType(op, out.scalar_type());
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> keep{out};
  if (flat.defined()) keep.push_back(flat);
  return launch(op, c10d::OpType::SCATTER, opts.timeout, {out0}, keep, cb.fn(), [&] {
    return xcclScatter(isRoot ? flat.data_ptr() : nullptr, out.data_ptr(), out.numel(), dt, root,
                       state_->comm, nullptr);
  });
}

namespace {
// Input of a reduce-scatter, with PREMUL_SUM folded into a scaled copy.
at::Tensor reduceScatterSend(const char* op, const at::Tensor& in, const c10d::ReduceOp& rop,
                             xcclRedOp_t& xop) {
  if (xop == xcclPremulSum) {
    xop = xcclSum;
    return premulScaled(op, in, rop);
  }
  return contig(in);
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  const at::Tensor& out0 = single(op, outputs, "output tensor");
  TORCH_CHECK(inputs.size() == 1, "xccl ", op, ": expected one input list, got ", inputs.size());
  checkList(op, inputs[0], out0, getSize(), "the input list");
  auto xop = toXcclOp(op, opts.reduceOp, out0.scalar_type());
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
  at::Tensor send = reduceScatterSend(op, at::cat(parts), opts.reduceOp, xop);
  at::Tensor out = contig(out0);
  CopyBack cb;
  cb.add(out0, out);
  auto dt = toXcclType(op, out.scalar_type());
  return launch(op, c10d::OpType::REDUCE_SCATTER, opts.timeout, {out0}, {send, out}, cb.fn(), [&] {
    return xcclReduceScatter(send.data_ptr(), out.data_ptr(), out.numel(), dt, xop, state_->comm,
                             nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* op = "_reduce_scatter_base";
  checkTensor(op, input, "input");
  checkTensor(op, output, "output");
  checkSame(op, input, output);
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "xccl ", op,
              ": input must have world_size * output elements (", output.numel() * getSize(),
              "), got ", input.numel());
  auto xop = toXcclOp(op, opts.reduceOp, input.scalar_type());
  at::Tensor send = reduceScatterSend(op, input, opts.reduceOp, xop);
  at::Tensor out = contig(output);
  CopyBack cb;
  cb.add(output, out);
  auto dt = toXcclType(op, out.scalar_type());
  return launch(op, c10d::OpType::_REDUCE_SCATTER_BASE, opts.timeout, {output}, {send, out},
                cb.fn(), [&] {
                  return xcclReduceScatter(send.data_ptr(), out.data_ptr(), out.numel(), dt, xop,
                                           state_->comm, nullptr);
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size(), "xccl ", op, ": ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  std::vector<at::Tensor> sends, outs, keep;
  std::vector<xcclRedOp_t> xops;
  CopyBack cb;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(op, inputs[i], "input");
    checkTensor(op, outputs[i], "output");
    checkSame(op, inputs[i], outputs[i]);
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * getSize(), "xccl ", op, ": input ", i,
                " must have world_size * output elements (", outputs[i].numel() * getSize(),
                "), got ", inputs[i].numel());
    auto xop = toXcclOp(op, opts.reduceOp, inputs[i].scalar_type());
    sends.push_back(reduceScatterSend(op, inputs[i], opts.reduceOp, xop));
    xops.push_back(xop);
    outs.push_back(contig(outputs[i]));
    cb.add(outputs[i], outs.back());
  }
  keep = sends;
  keep.insert(keep.end(), outs.begin(), outs.end());
  return launch(op, c10d::OpType::COALESCED, opts.timeout, outputs, keep, cb.fn(), [&] {
    return grouped([&] {
      for (size_t i = 0; i < sends.size(); ++i) {
        auto r = xcclReduceScatter(sends[i].data_ptr(), outs[i].data_ptr(), outs[i].numel(),
                                   toXcclType(op, outs[i].scalar_type()), xops[i], state_->comm,
                                   nullptr);
        if (r != xcclSuccess) return r;
      }
      return xcclSuccess;
    });
  });
}

namespace {
// Element counts and displacements of a dim-0 split of `t` (empty splits = even split).
void splitCounts(const char* op, const char* what, const at::Tensor& t,
                 const std::vector<int64_t>& splits, int size, std::vector<size_t>& counts,
                 std::vector<size_t>& displs) {
  counts.assign(size, 0);
  displs.assign(size, 0);
  int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  int64_t rowElems = rows == 0 ? 0 : t.numel() / rows;
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "xccl ", op, ": ", what, " dim 0 (", rows,
                ") is not divisible by the group size ", size, "; pass split sizes");
    for (int i = 0; i < size; ++i) {
      counts[i] = static_cast<size_t>(rows / size * rowElems);
      displs[i] = static_cast<size_t>(i * (rows / size) * rowElems);
    }
    return;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "xccl ", op, ": ", what,
              " split sizes must have one entry per rank (", size, "), got ", splits.size());
  int64_t sum = 0;
  for (int i = 0; i < size; ++i) {
    TORCH_CHECK(splits[i] >= 0, "xccl ", op, ": negative ", what, " split size ", splits[i]);
    counts[i] = static_cast<size_t>(splits[i] * rowElems);
    displs[i] = static_cast<size_t>(sum * rowElems);
    sum += splits[i];
  }
  TORCH_CHECK(sum == rows, "xccl ", op, ": ", what, " split sizes sum to ", sum,
              " but dim 0 of the ", what, " tensor is ", rows);
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::alltoall_base(at::Tensor& output,
                                                               at::Tensor& input,
                                                               std::vector<int64_t>& outputSplits,
                                                               std::vector<int64_t>& inputSplits,
                                                               const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  checkTensor(op, input, "input");
  checkTensor(op, output, "output");
  checkSame(op, input, output);
  int size = getSize();
  std::vector<size_t> sc, sd, rc, rd;
  splitCounts(op, "input", input, inputSplits, size, sc, sd);
  splitCounts(op, "output", output, outputSplits, size, rc, rd);
  at::Tensor in = contig(input), out = contig(output);
  CopyBack cb;
  cb.add(output, out);
  auto dt = toXcclType(op, input.scalar_type());
  bool even = inputSplits.empty() && outputSplits.empty();
  if (even) {
    TORCH_CHECK(input.numel() == output.numel(), "xccl ", op,
                ": input and output must have the same number of elements, got ", input.numel(),
                " and ", output.numel());
  }
  return launch(op, c10d::OpType::ALLTOALL_BASE, opts.timeout, {output}, {in, out}, cb.fn(), [&] {
    if (even) {
      return xcclAllToAll(in.data_ptr(), out.data_ptr(), in.numel() / size, dt, state_->comm,
                          nullptr);
    }
    return xcclAllToAllv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(), rd.data(),
                         dt, state_->comm, nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall";
  int size = getSize();
  TORCH_CHECK(static_cast<int>(inputs.size()) == size && static_cast<int>(outputs.size()) == size,
              "xccl ", op, ": expected one input and one output tensor per rank (", size, "), got ",
              inputs.size(), " and ", outputs.size());
  std::vector<size_t> sc(size), sd(size), rc(size), rd(size);
  std::vector<at::Tensor> parts;
  size_t s = 0, r = 0;
  for (int i = 0; i < size; ++i) {
    checkTensor(op, inputs[i], "input");
    checkTensor(op, outputs[i], "output");
    checkSame(op, inputs[0], inputs[i]);
    checkSame(op, inputs[0], outputs[i]);
    sc[i] = inputs[i].numel();
    sd[i] = s;
    s += sc[i];
    rc[i] = outputs[i].numel();
    rd[i] = r;
    r += rc[i];
    parts.push_back(inputs[i].reshape({-1}));
  }
  at::Tensor flatIn = at::cat(parts).contiguous();
  at::Tensor flatOut = at::empty({static_cast<int64_t>(r)}, inputs[0].options());
  auto outs = outputs;
  std::function<void()> post = [outs, flatOut, rc, rd]() {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flatOut.narrow(0, static_cast<int64_t>(rd[i]), static_cast<int64_t>(rc[i]))
                        .view(outs[i].sizes()));
    }
  };
  auto dt = toXcclType(op, inputs[0].scalar_type());
  return launch(op, c10d::OpType::ALLTOALL, opts.timeout, outputs, {flatIn, flatOut}, post, [&] {
    return xcclAllToAllv(flatIn.data_ptr(), sc.data(), sd.data(), flatOut.data_ptr(), rc.data(),
                         rd.data(), dt, state_->comm, nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                      int tag) {
  const char* op = "send";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, dstRank, getSize(), "destination rank");
  TORCH_CHECK(dstRank != getRank(), "xccl ", op, ": cannot send to self (rank ", dstRank, ")");
  at::Tensor buf = contig(t);
  auto dt = toXcclType(op, t.scalar_type());
  // Tags are not part of libxccl's matching: messages between two ranks match in order.
  return launch(op, c10d::OpType::SEND, kNoTimeout, {t}, {buf}, nullptr, [&] {
    return xcclSend(buf.data_ptr(), buf.numel(), dt, dstRank, state_->comm, nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                      int tag) {
  const char* op = "recv";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, srcRank, getSize(), "source rank");
  TORCH_CHECK(srcRank != getRank(), "xccl ", op, ": cannot receive from self (rank ", srcRank, ")");
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  return launch(op, c10d::OpType::RECV, kNoTimeout, {t}, {buf}, cb.fn(), [&] {
    return xcclRecv(buf.data_ptr(), buf.numel(), dt, srcRank, state_->comm, nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  const char* op = "recvAnysource";
  const at::Tensor& t = single(op, tensors);
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  int* peer = nullptr;
  return launch(
      op, c10d::OpType::RECVANYSOURCE, kNoTimeout, {t}, {buf}, cb.fn(),
      [&] { return xcclRecvAny(buf.data_ptr(), buf.numel(), dt, peer, state_->comm, nullptr); },
      &peer);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::barrier(const c10d::BarrierOptions& opts) {
  return launch("barrier", c10d::OpType::BARRIER, opts.timeout, {}, {}, nullptr,
                [&] { return xcclBarrier(state_->comm, nullptr); });
}

void ProcessGroupXCCL::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  // Store-based, like Gloo's: every rank checks in; rank 0 waits for each one (so it can name
  // the ranks that did not arrive), then releases the others.
  const char* op = "monitored_barrier";
  auto timeout = opTimeout(opts.timeout);
  uint64_t id = ++barrierCount_;
  std::string base = "xccl_mbarrier/" + std::to_string(id) + "/";
  int rank = getRank(), size = getSize();
  if (rank != 0) {
    store_->set(base + std::to_string(rank), std::vector<uint8_t>{1});
    try {
      store_->wait({base + "release"}, timeout);
    } catch (const std::exception& e) {
      throwDist(std::string("xccl ") + op + ": rank " + std::to_string(rank) +
                " was not released by rank 0 within " + std::to_string(timeout.count()) +
                " ms: " + e.what());
    }
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size; ++r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      store_->wait({base + std::to_string(r)}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      missing.push_back(r);
      if (!waitAllRanks) break;
    }
  }
  if (!missing.empty()) {
    std::ostringstream os;
    os << "xccl " << op << ": rank(s) ";
    for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i];
    os << " failed to pass monitoredBarrier in " << timeout.count() << " ms";
    throwDist(os.str());
  }
  store_->set(base + "release", std::vector<uint8_t>{1});
}

// ---------------------------------------------------------------- factory

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

// ---------------------------------------------------------------- Python module

namespace {
torch_xccl::ProcessGroupXCCL& asXccl(const c10::intrusive_ptr<c10d::Backend>& b) {
  auto* p = dynamic_cast<torch_xccl::ProcessGroupXCCL*>(b.get());
  TORCH_CHECK(p != nullptr, "not an xccl backend: ", b ? b->getBackendName() : "None");
  return *p;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "torch_xccl native module: the xccl c10d backend over libxccl";
  m.def(
      "_create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout, const std::string& groupName,
         const std::vector<uint64_t>& globalRanks) {
        return torch_xccl::createProcessGroupXCCL(store, rank, size, timeout, groupName,
                                                  globalRanks);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("group_name") = "", py::arg("global_ranks_in_group") = std::vector<uint64_t>{},
      py::call_guard<py::gil_scoped_release>());
  m.def("xccl_version", [] {
    int v = 0;
    xcclResult_t r = xcclGetVersion(&v);
    TORCH_CHECK(r == xcclSuccess, "xcclGetVersion: ", xcclGetErrorString(r));
    return v;
  });
  m.def("xccl_header_version", [] { return XCCL_VERSION_CODE; });
  m.def("_describe",
        [](const c10::intrusive_ptr<c10d::Backend>& b) { return asXccl(b).describe(); });
  m.def("_is_xccl_backend", [](const c10::intrusive_ptr<c10d::Backend>& b) {
    return dynamic_cast<torch_xccl::ProcessGroupXCCL*>(b.get()) != nullptr;
  });
}
