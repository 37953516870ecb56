// Work.hpp — what an operation of the xccl backend is made of: the communicator it runs on
// (CommState: the shared handle and its close/abort; DeviceComm: one communicator of the
// group and its stream), where an enqueue goes (Target), the completion thread's queue, and
// WorkXCCL, the c10d::Work torch waits on. ProcessGroupXCCL.hpp builds on it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "DesyncDebug.hpp"
#include "DeviceStreams.hpp"
#include "xccl.h"

namespace torch_xccl {

// What to do when an operation fails or times out in the completion thread.
// TORCH_XCCL_ASYNC_ERROR_HANDLING, values as in TORCH_NCCL_ASYNC_ERROR_HANDLING.
enum class AsyncErrorMode : int {
  kNoHandling = 0,   // report the error on the Work/future only
  kTearDown = 1,     // abort the communicator, then terminate the process
  kCleanUpOnly = 2,  // abort the communicator (pending and later ops fail); default
  kSkipCleanUp = 3,  // terminate the process without aborting the communicator
};

class ProcessGroupXCCL;
class WorkXCCL;

// Works waiting for their completion to be published in the background (their futures,
// async error handling). The completion thread is NOT woken per operation: a caller that
// waits completes its Work itself, and waking a thread per collective cost a context switch
// each (measured: half of the torch-level latency of an 8-byte allreduce on 2 cores). It is
// woken when someone asks for a Work's future (DDP's comm hooks wait on it), and otherwise
// sweeps the queue every kSweepMs with non-blocking queries.
struct CompletionQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<c10::intrusive_ptr<WorkXCCL>> works;
  bool stop = false;
  bool exiting = false;  // the interpreter is about to finalize: end now, wait for nothing
  bool urgent = false;   // a future was requested: complete the front promptly
  void wake() {
    {
      std::lock_guard<std::mutex> g(mu);
      urgent = true;
    }
    cv.notify_one();
  }
};

// Shared state of one communicator. Works keep it alive.
//
// xcclCommAbort/xcclCommDestroy free the handle, so every call that uses `comm` holds `rw`
// shared (waits are cut into <= kPollMs slices), and abort/destroy take it exclusively after
// setting `closing` (which keeps new readers out, so the writer cannot starve).
struct CommState {
  xcclComm_t comm = nullptr;
  // An aborted communicator is interrupted, not freed, and kept here until the state goes:
  // a shrink (ProcessGroupXCCL::shrink) needs its member list after a failure. No
  // operation uses it.
  xcclComm_t retired = nullptr;
  ~CommState();
  std::shared_mutex rw;
  std::atomic<bool> closing{false};
  std::mutex closeMu;    // one close() at a time (it reads comm outside the lock to interrupt)
  std::mutex enqueueMu;  // enqueue + event record happen in one order for all threads
  std::mutex errMu;
  std::string closedReason;  // why comm is gone (guarded by errMu)
  int rank = 0;
  int size = 0;
  std::string name;                        // process-group name, for messages
  std::shared_ptr<DesyncDebugger> desync;  // TORCH_XCCL_DESYNC_DEBUG=1 only
  // TORCH_XCCL_USE_COMM_NONBLOCKING=1: comm was made non-blocking and may still be in
  // creation; the first use waits for it (awaitCreation). createCtx: what the creation's
  // store callbacks use, freed after comm (so after the creation thread).
  std::atomic<bool> creating{false};
  std::mutex createMu;
  std::shared_ptr<void> createCtx;
  // Waits (polling xcclCommGetAsyncError) until a non-blocking creation ends; a failed one
  // throws DistBackendError with its reason. Returns at once when none is running.
  void awaitCreation();

  // Runs f(comm) under the shared lock; returns false (and leaves r untouched) when the
  // communicator is closed.
  template <typename F>
  bool use(F&& f) {
    if (creating.load(std::memory_order_acquire)) awaitCreation();
    if (closing.load()) return false;
    std::shared_lock<std::shared_mutex> lk(rw);
    if (comm == nullptr) return false;
    f(comm);
    return true;
  }
  std::string reason() {
    std::lock_guard<std::mutex> g(errMu);
    return closedReason.empty() ? std::string("communicator was shut down") : closedReason;
  }
  // Aborts (or, with destroy=true, destroys) the communicator once; later calls are no-ops.
  // An abort keeps the interrupted handle (retired) for a later shrink.
  void close(const std::string& why, bool destroy);
  // xcclCommShrink of the live or retired communicator (throws DistBackendError on failure).
  xcclComm_t shrink(const std::vector<int>& exclude, int xcclFlags);
  // f(handle) with the live or retired communicator under the shared lock; false if none.
  template <typename F>
  bool useEvenClosed(F&& f) {
    if (creating.load(std::memory_order_acquire)) awaitCreation();
    std::shared_lock<std::shared_mutex> lk(rw);
    xcclComm_t c = comm != nullptr ? comm : retired;
    if (c == nullptr) return false;
    f(c);
    return true;
  }
};

// Where one enqueue goes: the communicator and libxccl's stream argument (NULL on the host
// communicator).
struct Target {
  xcclComm_t comm = nullptr;
  xcclStream_t stream = nullptr;
};
using Enqueue = std::function<xcclResult_t(const Target&)>;

// One communicator of the group. The host one (cpu tensors) is made with the group; the xdev
// one (the process's device) at the group's first operation there, or eagerly at
// init_process_group(device_id=...), as ProcessGroupNCCL makes its CUDA communicator. The
// device communicator has its own communication stream; every operation on it first waits
// (event) for the caller's current stream.
struct DeviceComm {
  std::shared_ptr<CommState> state;
  c10::Device device{c10::kCPU};
  std::optional<c10::Stream> stream;   // the communication stream (xdev only)
  std::unique_ptr<DeviceEvent> ready;  // reused per launch: the caller's stream position
};

class WorkXCCL : public c10d::Work {
 public:
  WorkXCCL(int rank, c10d::OpType type, const char* opName, uint64_t seq,
           std::vector<at::Tensor> outputs, std::vector<at::Tensor> keepAlive,
           std::function<void()> post, std::chrono::milliseconds timeout,
           std::shared_ptr<CommState> comm, bool blockingWait, AsyncErrorMode errorMode,
           std::optional<c10::Stream> stream = std::nullopt, bool hostBlocking = false);
  ~WorkXCCL() override = default;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const { return seq_; }
  // work._get_duration(): milliseconds the operation took, from its start (not from its
  // enqueue behind earlier ones) to its end; TORCH_XCCL_ENABLE_TIMING=1 and a completed
  // operation only. Host operations: libxccl's event times (xcclEventElapsedTime) or the
  // caller's clock when it ran the operation itself; device ones: timing events on the
  // communication stream.
  float getDuration() const override;

  // --- used by ProcessGroupXCCL and its completion thread ---
  void setEvent(const xcclEvent_t& ev);
  bool hasEvent() const { return hasEvent_.load(); }
  const xcclEvent_t& event() const { return event_; }
  const char* opName() const { return opName_; }
  std::chrono::steady_clock::time_point deadline() const { return deadline_; }
  // Runs the post step (once) and completes the Work and its future.
  void complete(std::exception_ptr error);
  // Device operations (constructed with their communication stream): done when `end`
  // passes (set at launch). The future is device-aware (as ProcessGroupNCCL's): marked
  // complete at launch with an event on the communication stream, so its callbacks and
  // waits order streams, not the host. hostBlocking: wait() blocks the host too (barrier).
  void setEnd(std::shared_ptr<DeviceEvent> end);
  bool onDevice() const { return stream_.has_value(); }
  // Progress of the operation, optionally blocking up to waitMs.
  enum class Status { kRunning, kDone, kFailed, kClosed };
  Status poll(int64_t waitMs, xcclResult_t& r, std::string& detail);
  bool done() const { return done_.load(); }
  int* peerSlot() { return &peer_; }
  void setPeerIsOutput(bool v) { peerIsOutput_ = v; }
  // Set at launch: where getFuture() asks for prompt background completion.
  void setCompletionQueue(std::weak_ptr<CompletionQueue> q) { completionQueue_ = std::move(q); }
  bool futureWanted() const { return futureWanted_.load(); }

 private:
  std::exception_ptr makeError(xcclResult_t r, const std::string& what) const;
  // The caller's current stream waits for the end event (device operations).
  void orderCurrentStream();
  // Completes from a poll result (kRunning: nothing). Returns whether the work is done.
  bool settle(Status st, xcclResult_t r, const std::string& detail);

  const char* opName_;
  uint64_t seq_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keepAlive_;
  std::function<void()> post_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
  std::shared_ptr<CommState> comm_;
  bool blockingWait_;
  AsyncErrorMode errorMode_;
  xcclEvent_t event_{};
  std::atomic<bool> hasEvent_{false};
  std::mutex completeMu_;
  std::atomic<bool> done_{false};
  int peer_ = -1;
  bool peerIsOutput_ = false;
  uint64_t collSeq_ = 0;   // collective number for the desync report (0: point-to-point)
  uint64_t flightId_ = 0;  // its flight-recorder entry (0: none)
  mutable std::atomic<bool> timedOut_{false};  // set by makeError: the recorder's "timed out"
  // The future's type and devices; marks f with the outcome (after complete()).
  c10::intrusive_ptr<c10::ivalue::Future> makeFuture() const;
  void markFuture(const c10::intrusive_ptr<c10::ivalue::Future>& f);
  std::mutex futureMu_;                             // future_ and settled_
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // device: made at once; host: on request
  bool settled_ = false;                            // complete() has run
  std::atomic<bool> futureWanted_{false};
  std::weak_ptr<CompletionQueue> completionQueue_;  // weak: the queue holds the Work
  std::optional<c10::Stream> stream_;               // device operations: the communication stream
  std::shared_ptr<DeviceEvent> end_;  // passes when the operation and its post step are done
  bool hostBlocking_ = false;
  bool futureMarked_ = false;  // device futures are completed at launch
  // TORCH_XCCL_ENABLE_TIMING (set at launch): the one of the three clocks that timed it.
  std::optional<std::pair<std::chrono::steady_clock::time_point,
                          std::chrono::steady_clock::time_point>>
      callerTimes_;                             // ran on the caller: start, end
  std::optional<xcclEvent_t> startEvent_;       // host, asynchronous: ends at event_
  std::shared_ptr<DeviceEvent> startOnDevice_;  // device: ends at end_ (a timing event)

  friend class ProcessGroupXCCL;
};

}  // namespace torch_xccl
