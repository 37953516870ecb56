// The CUDA reference device (built with XCCL_WITH_CUDA): user buffers in CUDA device memory,
// collectives ordered on the caller's cudaStream_t as NCCL orders them.
//
//   copies     cudaMemcpyAsync (cudaMemcpyDefault: device, pinned staging or a peer's IPC
//              mapping alike) on a stream of the calling (progress) thread, then synchronized
//   kernels    kernels.cu: reduce / scale / divide for every dtype and op
//   staging    transports' host rings are registered (cudaHostRegister, mapped) so kernels
//              read them in place
//   shared     (cuda_shared.cc) payload lanes of the shared-memory transport live in device
//              memory exported with cudaIpcGetMemHandle: ranks on one host move payloads device to
//              device, also two ranks on one GPU (NCCL refuses those; we allow them)
//   ordering   streamCapture = an event recorded on the caller's stream; streamHold = the
//              stream waits on a word of mapped host memory (cuStreamWaitValue32, or a
//              one-thread spin kernel) that streamResume sets, and the steps are CUDA calls
//              of the progress thread. XCCL_CUDA_HOLD=exec instead queues the executor
//              (exec.h, cuda_exec.cc): a kernel on the caller's stream that runs the
//              collective's copies and reductions as the progress thread posts them through
//              mapped host memory and returns when streamResume says stop, so no CUDA call is
//              made from the host while the stream is held
//
// The library links the static CUDA runtime, which loads the driver when first used: a build
// with CUDA runs on machines without a GPU or driver, and there getDevice("cuda") throws.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "collectives/device/device.h"

namespace xccl {

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int ordinal);  // throws InvalidUsage without a driver / that ordinal
  // FP8: CUDA's own conversions saturate where torch's (and the host's) give NaN or
  // infinity, so the CUDA kernels do not take them yet; staged, the host reduces them.
  bool supportsType(xcclDataType_t dtype) const override {
    return staged_ || (dtype != xcclFloat8e4m3 && dtype != xcclFloat8e5m2);
  }
  ~CudaDevice() override;
  static int currentOrdinal();  // the calling thread's current CUDA device (throws like above)
  static int deviceCount();     // 0 when there is no usable driver or GPU (never throws)
  // The wiring of this host's GPUs (device.h; cuda_wiring.cc): XL where the pair has native
  // peer atomics (NVLink), else PIX/PXB/PHB/NODE/SYS from their PCI paths in sysfs.
  static DeviceWiring wiring();

  const char* name() const override { return "cuda"; }
  int ordinal() const override { return ordinal_; }
  std::string busId() const override { return busId_; }

  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void registerStaging(void* ptr, size_t bytes) override;
  void unregisterStaging(void* ptr) override;

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind) override;
  void reduce(void* dst, const void* a, const void* b, size_t count, xcclDataType_t dtype,
              xcclRedOp_t op) override;
  void scale(void* dst, const void* src, size_t count, xcclDataType_t dtype,
             const void* scalar) override;
  void divide(void* dst, size_t count, xcclDataType_t dtype, int64_t divisor) override;

  void* streamCapture(xcclStream_t stream) override;
  void streamWait(void* token, const std::atomic<bool>& abort) override;
  void streamRelease(void* token) override;
  void* streamHold(xcclStream_t stream, const char* label) override;
  bool streamOrdered() const override { return true; }
  void streamResume(void* token) override;
  void streamFail(void* token, const std::string& why) override;

  // Staging through host memory (XCCL_CUDA_STAGING=1, the default; cuda_stage.cc).
  bool stagesThroughHost() const override { return staged_; }
  char* stageBegin(xcclStream_t stream, size_t bytes, Device& engine) override;
  void stageIn(xcclStream_t stream, const std::vector<StageCopy>& copies) override;
  void stageOut(std::vector<StageCopy>&& copies) override;

  bool prefersSharedRings() const override { return true; }
  void* allocShared(size_t bytes, std::string* handle) override;
  void* openShared(const std::string& handle, int ownerPid, size_t bytes) override;
  void closeShared(void* ptr, size_t bytes, bool owner) override;

  struct Hold;     // one stream-side hold (cuda_device.cc)
  struct Capture;  // a streamCapture token: the event, and the hold enqueued right after it
  struct Stage;    // pinned host memory of one staged operation (cuda_stage.cc)
  // Where the progress threads' time on this device went (XCCL_CUDA_STATS=1 prints it when
  // the device goes, at process exit): calls, bytes and wall time per kind of operation.
  enum StatKind { kStatCopy, kStatReduce, kStatScale, kStatWait, kStatAlloc, kStatHold, kStats };
  struct Stat {
    std::atomic<uint64_t> calls{0}, bytes{0}, ns{0};
  };

 private:
  void current() const;      // makes this device current on the calling thread
  void* workStream() const;  // the calling thread's internal stream on this device
  void finish(int err, const char* what) const;  // checks a launch, then synchronizes
  const void* deviceView(const void* p) const;   // registered host memory as the GPU sees it

  // The executor (cuda_exec.cc). execSetup: the per-hold device words, at construction.
  void execSetup();
  bool execPrepare(Hold* h);  // the hold's mailbox and word (false: none left)
  void execLaunch(Hold* h, void* stream);
  void execWaitStarted(Capture* c);  // streamWait of a collective with an executor
  // One step (cuda::ExecKind; count in bytes for a copy, elements otherwise) through the
  // calling thread's running executor, synchronously; false when it has none (XCCL_CUDA_HOLD
  // is not exec, or no collective of this thread is running): the caller launches it itself.
  bool execStep(uint32_t kind, xcclDataType_t dtype, xcclRedOp_t op, size_t count, void* dst,
                const void* a, const void* b, uint64_t scalar);
  Hold* execRunning() const;                    // the calling thread's running executor, or null
  void execPost(Hold* h, const void* command);  // one step, synchronously
  void execStop(Hold* h, uint32_t how);         // 1 done, 2 failed

  int ordinal_;
  std::string busId_;
  bool hostPointersWork_ = true;    // registered host memory has the same address on the GPU
  void* waitValue_ = nullptr;       // cuStreamWaitValue32, when the driver offers it
  bool exec_ = false;               // holds are executors (XCCL_CUDA_HOLD=exec / auto)
  unsigned execBlocks_ = 16;        // XCCL_CUDA_EXEC_BLOCKS
  unsigned* execWords_ = nullptr;   // device memory: one arrival counter per executor hold
  std::vector<unsigned> execFree_;  // indices into execWords_ not taken by a hold
  // Executors started and not yet stopped, under execMu_ alone: a step's lookup must never
  // wait for mu_, which streamHold holds across CUDA calls of the enqueuing thread.
  mutable std::mutex execMu_;
  std::vector<Hold*> running_;
  bool trapFailed_ = true;  // XCCL_CUDA_FAILED_HOLD=trap
  // Staging (cuda_stage.cc): on unless XCCL_CUDA_STAGING=0 or the holds are executors.
  bool staged_ = false;
  void* writeValue_ = nullptr;   // cuStreamWriteValue32, when the driver offers it
  static Stage* currentStage();  // the stage this thread is enqueuing an operation on, or null
  static Stage* takeStage();     // that stage, no longer this thread's (streamHold)
  void stageMark(Stage* s, void* stream);    // queues "the inputs are staged" (capture)
  void stageFinish(Stage* s, void* stream);  // after a hold: the copies back, then `done`
  void stageFreeAll();                       // at destruction
  std::vector<Stage*> stages_;  // under mu_: every stage made, reused once its stream passed

  mutable std::mutex mu_;
  std::map<const char*, std::pair<size_t, const char*>> staging_;  // host base -> (bytes, device)
  std::vector<Hold*> holds_;   // every hold made, reused once the stream has passed it
  std::set<void*> ipcOpened_;  // peers' memory mapped with cudaIpcOpenMemHandle
  Stat stats_[kStats];
  bool statsOn_ = false;
};

}  // namespace xccl
