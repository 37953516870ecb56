// ProcessGroupXCCL.hpp — the c10d backend of torch_xccl.
//
// torch_xccl::ProcessGroupXCCL is a c10d::Backend that runs every collective on one libxccl
// communicator (xccl.h is the only libxccl interface used). It lives in our own namespace:
// the torch headers already declare c10d::ProcessGroupXCCL (Intel's XPU backend).
//
// Life of an operation on cpu tensors (the host communicator):
//   caller thread: check arguments -> stage (contiguous copies, flat buffers) -> enqueue on the
//                  communicator -> xcclEventRecord -> WorkXCCL (holds event, inputs, outputs)
//   completion thread (one per backend): waits the events in enqueue order, runs the work's
//                  post step (copy back into non-contiguous / list outputs), marks the Work and
//                  its c10::ivalue::Future complete (DDP's comm-hook futures rely on this).
//   Work::wait(): waits the same event on the caller's thread (whichever side sees completion
//                  first runs the post step; it runs exactly once).
// On xdev tensors (the group's device communicator, ProcessGroupNCCL semantics): the
// communication stream waits for the caller's stream, the tensors are recorded on it, the
// collective and the post step are queued on it, then an end event; the future is
// device-aware and complete at launch; wait() makes the caller's stream wait for the end
// event; the completion thread watches for failures (docs/PLUGIN.md).
//
// Files: Utils (knobs, errors, checks, staging, store adapter), Work.hpp/.cpp (WorkXCCL,
// CommState, DeviceComm, the completion queue),
// ProcessGroupXCCL.cpp (construction, teardown), Launch (launch, coalescing), Completion (the
// completion thread), the collectives: Reductions, GatherScatter, AllToAll, PointToPoint and
// Barriers; DeviceComms (the xdev communicator, eager init, split), DeviceStreams (xdev
// streams and events), DesyncDebug (TORCH_XCCL_DESYNC_DEBUG), FlightRecorder and FlightDump
// (the last N operations, dumped on failure, SIGUSR1 or demand), Bindings (the pybind11
// module).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "DesyncDebug.hpp"
#include "DeviceStreams.hpp"
#include "Work.hpp"
#include "xccl.h"

namespace torch_xccl {

class ProcessGroupXCCL : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
        : c10d::Backend::Options("xccl", timeout) {}
    // A failed collective leaves its device stream running (xcclStreamErrorsReport) instead
    // of failing it: for callers that discard the whole step on any error (torch_xccl.ft).
    bool reportStreamErrors = false;
  };

  ProcessGroupXCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   c10::intrusive_ptr<Options> options);
  // Adopts communicators made from another group's (split, shrink): `host` for cpu tensors
  // and, when the parent had one, `device` (its communicator on `deviceOf`). `store` is used
  // as given. Adopted{} makes a new host communicator over the store (the constructor above).
  struct Adopted {
    xcclComm_t host = nullptr;
    xcclComm_t device = nullptr;
    c10::Device deviceOf{c10::kCPU};
  };
  ProcessGroupXCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   c10::intrusive_ptr<Options> options, Adopted adopted);
  ~ProcessGroupXCCL() override;

  const std::string getBackendName() const override { return "xccl"; }
  // (no `override` on hooks that older torch releases may lack; they still override when present)
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() { return options_; }
  bool supportsCoalescing() const override { return true; }
  bool supportsSplitting() const override { return true; }
  void eagerConnectSingleDevice(at::Device device) override;
  // A new backend over `ranks` (ranks of this group, sorted); null where this rank is not
  // among them. torch calls it once per device type of the group: the second call returns
  // the backend the first one made.
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  uint64_t splitCount() const { return splitCount_; }
  // dist.shrink_group (torch >= 2.10; no `override`, as above): the group without
  // `ranksToExclude`, on communicators xcclCommShrink makes from this group's (host, and the
  // device one if made), without the store's rendezvous. shrinkFlags & 1 (SHRINK_ABORT):
  // pending operations fail first. Only the remaining ranks call it.
  bool supportsShrinking() const { return true; }
  // Which ranks of the group still answer (xcclCommProbeAlive on the host communicator, live
  // or aborted), within timeoutMs: the list to exclude is the ranks that do not.
  std::vector<bool> probeAlive(int64_t timeoutMs);
  // xcclCommRevoke on every communicator of the group: pending and later operations fail here
  // and on every rank still reachable, naming the revocation; the group can still shrink.
  void revoke();
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<int64_t>& ranksToExclude, int shrinkFlags = 0,
      const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride = nullptr);
  void setTimeout(std::chrono::milliseconds timeout) { options_->timeout = timeout; }

  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // Ends a block torch will not end (Launch.cpp says when); coalescing(): a block is open.
  void abandonCoalescing(const std::string& why);
  bool coalescing() const { return coalescing_; }

  // torch_xccl.direct (Direct.cpp): allreduce of a contiguous cpu tensor in place, run on
  // this thread with no Work. False when the host communicator is closed (nothing ran);
  // throws for bad input and for a failed operation (after the group's error handling).
  bool directAllreduce(const at::Tensor& t, const c10d::ReduceOp& op);
  // Why the host communicator is closed, for the caller of a direct call that returned false.
  std::string closedReason();

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }
  void abort();
  void shutdown();
  // Ends the completion thread of every live backend without waiting for their Works, from
  // Python's atexit, before the interpreter finalizes (ProcessGroupXCCL.cpp says why).
  static void stopCompletionThreadsBeforeExit();

  // Introspection for Python (torch_xccl._C).
  std::string describe() const;
  xcclComm_t comm() const { return state_->comm; }
  // The device this group's xdev communicator is bound to ("" when none yet).
  std::string deviceCommDevice();

 private:
  // all_gather whose output tensors differ in size (GatherScatter.cpp).
  c10::intrusive_ptr<c10d::Work> allgatherUneven(std::vector<at::Tensor>& outs,
                                                 const at::Tensor& in0,
                                                 const c10d::AllgatherOptions& opts);
  // What launch() needs beyond the tensors: the device of an operation without tensors
  // (barrier), where recvAnysource writes its peer.
  struct LaunchExtra {
    std::optional<c10::Device> device;
    int** peerSlot = nullptr;
    // torch waits for this op at once (its options' asyncOp is false: a blocking call).
    bool callerWaits = false;
    // broadcast, scatter: the root, whose inputs alone are data (TORCH_XCCL_NAN_CHECK).
    int root = -1;
  };
  template <typename Opts>
  static LaunchExtra blockingCall(const Opts& opts) {
    LaunchExtra e;
    e.callerWaits = !opts.asyncOp;
    return e;
  }
  template <typename Opts>
  static LaunchExtra rootedCall(const Opts& opts) {
    LaunchExtra e = blockingCall(opts);
    e.root = static_cast<int>(opts.rootRank);
    return e;
  }
  // One operation, as a collective hands it to launch() once it checked the arguments and
  // staged the buffers (designated initializers name the fields at the call).
  struct Op {
    const char* name = nullptr;
    c10d::OpType type = c10d::OpType::UNKNOWN;
    c10::ArrayRef<at::Tensor> inputs;  // the caller's inputs, as the flight recorder shows them
    std::chrono::milliseconds timeout = kNoTimeout;
    std::vector<at::Tensor> outputs;    // the Work's result()
    std::vector<at::Tensor> keepAlive;  // staging buffers the operation reads or writes
    std::function<void()> post;         // the copy-backs into the caller's tensors (or null)
    Enqueue enqueue;
    LaunchExtra extra;
  };
  // What launch() decided for an Op: the device, its communicator and the Work.
  struct Launch {
    c10::Device device{c10::kCPU};
    std::shared_ptr<DeviceComm> dc;
    c10::intrusive_ptr<WorkXCCL> work;
    bool p2p = false;    // numbered apart from the collectives
    std::string issued;  // the desync report's description (TORCH_XCCL_DESYNC_DEBUG only)
  };
  // Checks nothing about the arguments (the collectives did); picks the communicator from
  // the tensors' device, enqueues, and returns the Work. On xdev: ordered on the
  // communicator's stream after the caller's current stream; `post` is queued on that stream.
  // Launch.cpp: prepare makes the Work, then one of the three run* functions enqueues it.
  c10::intrusive_ptr<c10d::Work> launch(Op op);
  Launch prepare(Op& op);
  c10::intrusive_ptr<c10d::Work> runOnCaller(const Op& op, Launch& l);
  c10::intrusive_ptr<c10d::Work> runOnStream(Op& op, Launch& l);
  c10::intrusive_ptr<c10d::Work> runAsync(const Op& op, Launch& l);
  // Enqueues on `target`, numbers and records the operation; throws where libxccl refused it
  // or the communicator is closed. Returns false inside a coalescing block, where the Work
  // joins the block (endCoalescing gives it its event). The caller holds enqueueMu.
  bool enqueueAndRecord(const Op& op, Launch& l, const Target& target);
  void numberAndRecord(const Op& op, Launch& l);
  void takeBack(Launch& l, const std::string& why);
  void finishOnStream(const std::vector<c10::intrusive_ptr<WorkXCCL>>& works,
                      const c10::Stream& stream, const std::function<void()>& post);
  c10::Device deviceOf(const char* opName, const std::vector<at::Tensor>& outputs,
                       const std::vector<at::Tensor>& inputs, const LaunchExtra& extra);
  // The xdev communicator of the group (made at the first call on the device).
  std::shared_ptr<DeviceComm> commFor(const char* opName, const c10::Device& device);
  std::shared_ptr<DeviceComm> makeDeviceComm(const c10::Device& device);
  std::vector<std::shared_ptr<CommState>> allComms();
  std::chrono::milliseconds opTimeout(std::chrono::milliseconds requested) const;
  void completionLoop();
  c10::intrusive_ptr<WorkXCCL> nextWorkToComplete();
  static constexpr int kSweepMs = 20;
  void handleAsyncError(std::exception_ptr error);
  void abortComm(const std::string& reason);

  // The store torch handed us, scoped to this initialisation (Rendezvous.hpp): every key the
  // backend and libxccl write lives under storeScope_, never shared with an earlier attempt.
  c10::intrusive_ptr<c10d::Store> store_;
  std::string storeScope_;
  c10::intrusive_ptr<Options> options_;
  std::shared_ptr<CommState> state_;  // the host communicator
  std::shared_ptr<DeviceComm> host_;  // state_ as a DeviceComm
  std::mutex devMu_;
  std::shared_ptr<DeviceComm> devComm_;  // the xdev communicator (null until first needed)
  std::mutex splitMu_;
  uint64_t splitCount_ = 0;
  std::map<std::string, c10::weak_intrusive_ptr<c10d::Backend>> splits_;  // by group name
  uint64_t shrinkCount_ = 0;                                              // under splitMu_
  // The parts of construction both constructors share, after the host communicator exists.
  void finishConstruction(xcclComm_t host);
  xcclComm_t initHostComm();  // a new group's host communicator, over the store
  std::atomic<uint64_t> seq_{0};
  uint64_t collSeq_ = 0;       // collectives only (desync report, flight recorder); under enqueueMu
  uint64_t p2pSeq_ = 0;        // point-to-point ops (flight recorder); under enqueueMu
  uint32_t flightGroup_ = 0;   // this group in the flight recorder
  uint64_t barrierCount_ = 0;  // for monitoredBarrier store keys
  bool blockingWait_ = false;
  AsyncErrorMode errorMode_ = AsyncErrorMode::kCleanUpOnly;
  // TORCH_XCCL_RUN_ON_CALLER: blocking host collectives run on the calling thread.
  bool runOnCaller_ = true;
  // TORCH_XCCL_ENABLE_TIMING: every Work can tell its duration (_get_duration).
  bool timing_ = false;
  // TORCH_XCCL_NAN_CHECK: collectives check their inputs first (checkNan).
  bool nanCheck_ = false;
  // Before a collective runs: every rank checks its floating-point inputs for NaN (at the
  // root only for broadcast and scatter) and the ranks agree, through one 4-byte allreduce on
  // the host communicator, on the lowest rank that found one; then every rank raises naming
  // it and the collective does not run. Not inside coalescing blocks, not for point-to-point.
  void checkNan(const Op& op);
  // A coalescing block's start (TORCH_XCCL_ENABLE_TIMING): on the host communicator, and on
  // the device's communication stream at its first device operation.
  std::optional<xcclEvent_t> coalescedStart_;
  std::shared_ptr<DeviceEvent> coalescedStartOnDevice_;

  // coalescing (startCoalescing .. endCoalescing): works wait for the group's single event
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<WorkXCCL>> coalesced_;
  std::shared_ptr<DeviceComm> coalescedComm_;          // the block's communicator (first op's)
  std::vector<std::function<void()>> coalescedPosts_;  // device: queued after the group ends

  // completion thread
  void enqueueForCompletion(const std::vector<c10::intrusive_ptr<WorkXCCL>>& works);
  static void takeFinished(std::deque<c10::intrusive_ptr<WorkXCCL>>& q,
                           std::vector<c10::intrusive_ptr<WorkXCCL>>& out);
  void stopCompletionThread();
  std::shared_ptr<CompletionQueue> cq_ = std::make_shared<CompletionQueue>();
  std::thread completion_;
  std::mutex completionJoinMu_;  // stopCompletionThread and the exit hook may both join
  bool exitingNow() {
    std::lock_guard<std::mutex> g(cq_->mu);
    return cq_->exiting;
  }
  // Every live backend, for stopCompletionThreadsBeforeExit.
  static std::mutex& liveMu();
  static std::set<ProcessGroupXCCL*>& liveBackends();
};

// Counts this thread's open coalescing blocks over every group (Launch.cpp): opened true at
// startCoalescing, false where the block ends or is abandoned. An operation of a group with
// no block of its own is refused while any is open (launch(), Direct.cpp).
void noteCoalescingBlock(bool opened);
int coalescingBlocksOnThisThread();

// Factory used by torch_xccl._C (and the Python routing module).
c10::intrusive_ptr<ProcessGroupXCCL> createProcessGroupXCCL(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& groupName,
    const std::vector<uint64_t>& globalRanks, bool reportStreamErrors = false);

}  // namespace torch_xccl
