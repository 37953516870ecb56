// The CUDA device: see cuda_device.h.
#include "cuda_device.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "cuda_hold.h"
#include "kernels.h"

namespace xccl {

// How the caller's stream is held during a collective: "memop" (cuStreamWaitValue32 on a host
// word, the steps as CUDA calls of the progress thread), "kernel" (a one-thread spin kernel on
// that word), "exec" (the executor kernel runs the collective's steps and is the hold,
// exec.h); "auto" = memop where the driver has stream memory operations, else kernel. exec is
// correct on an H100 (every conformance check) but was slower there with two processes on
// one GPU and did not cure the module-load hang (docs/CUDA.md): not the default yet.
XCCL_PARAM_STR(CudaHold, "CUDA_HOLD", "auto")
// What a failed collective does to the caller's stream: "trap" (default) faults the CUDA
// context behind the hold, so nothing can consume the failed outputs and every later CUDA
// call of the process raises (ProcessGroupNCCL tears the process down likewise); "release"
// resumes the stream as if it had succeeded and relies on the host-side error alone.
XCCL_PARAM_STR(CudaFailedHold, "CUDA_FAILED_HOLD", "trap")
// 1 (default): run each collective on pinned host copies of its buffers, queued on the
// caller's stream by the enqueuing thread, so that the progress thread makes no CUDA call
// while the stream is held (cuda_stage.cc: a module load cannot deadlock it); 0: the steps
// run on the GPU as CUDA calls of the progress thread (payload lanes in device memory).
// XCCL_CUDA_HOLD=exec implies 0. Every rank of a communicator must agree.
XCCL_PARAM(CudaStaging, "CUDA_STAGING", 1, 0, 1)
// 1: print where this device's time went (per kind of operation) when it is destroyed.
XCCL_PARAM(CudaStats, "CUDA_STATS", 0, 0, 1)

namespace {

[[noreturn]] void fail(cudaError_t e, const char* what) {
  cudaGetLastError();  // clear a sticky launch error so the next call reports its own
  throw Error(ErrorKind::kUnhandled,
              strCat("CUDA ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(e, what);
}

// The calling thread's internal streams, one per device: copies and kernels of the
// progress thread that calls, never ordered with the user's streams or other threads'.
struct WorkStreams {
  std::map<int, cudaStream_t> byDevice;
  ~WorkStreams() {
    for (auto& [dev, s] : byDevice) cudaStreamDestroy(s);  // fails harmlessly at exit
  }
};
thread_local WorkStreams tlsStreams;

using WaitValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// A driver function through the runtime (libcuda is never linked), or null when the driver
// lacks it.
void* driverEntry(const char* name) {
  cudaDriverEntryPointQueryResult q{};
  void* fn = nullptr;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess) {
    return fn;
  }
  cudaGetLastError();
  return nullptr;
}

// Adds a scope's wall time (and bytes) to one of the device's counters, when they are on.
class Timed {
 public:
  Timed(bool on, CudaDevice::Stat& s, uint64_t bytes) : s_(on ? &s : nullptr), bytes_(bytes) {
    if (s_) t0_ = std::chrono::steady_clock::now();
  }
  ~Timed() {
    if (!s_) return;
    auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_)
            .count();
    s_->calls.fetch_add(1, std::memory_order_relaxed);
    s_->bytes.fetch_add(bytes_, std::memory_order_relaxed);
    s_->ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  CudaDevice::Stat* s_;
  uint64_t bytes_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

int CudaDevice::deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw InvalidUsage(strCat("no CUDA device: cudaGetDeviceCount: ", cudaGetErrorString(e),
                              " (a build with CUDA runs without a GPU, but the cuda device "
                              "needs one and its driver)"));
  }
  XCCL_CHECK(ordinal >= 0 && ordinal < n, "cuda:", ordinal, " does not exist (", n,
             " CUDA devices visible)");
  current();
  // Before any hold: a kernel loaded lazily at its first launch would wait for a held stream.
  check(cuda::preloadKernels(), "loading the CUDA device's kernels");
  check(cuda::preloadExec(), "loading the CUDA device's executor kernel");
  char bus[64] = {0};
  busId_ = cudaDeviceGetPCIBusId(bus, sizeof(bus), ordinal) == cudaSuccess
               ? std::string(bus)
               : strCat("cuda:", ordinal);
  int attr = 0;
  cudaDeviceGetAttribute(&attr, cudaDevAttrCanUseHostPointerForRegisteredMem, ordinal);
  hostPointersWork_ = attr != 0;

  const std::string failed = xcclParamCudaFailedHold();
  XCCL_CHECK(failed == "trap" || failed == "release", "XCCL_CUDA_FAILED_HOLD='", failed,
             "' (trap or release)");
  trapFailed_ = failed == "trap";
  const std::string hold = xcclParamCudaHold();
  XCCL_CHECK(hold == "auto" || hold == "exec" || hold == "memop" || hold == "kernel",
             "XCCL_CUDA_HOLD='", hold, "' (auto, exec, memop or kernel)");
  exec_ = hold == "exec";
  if (hold != "kernel") {
    waitValue_ = driverEntry("cuStreamWaitValue32");
    XCCL_CHECK(waitValue_ != nullptr || hold != "memop",
               "XCCL_CUDA_HOLD=memop: the driver has no cuStreamWaitValue32");
  }
  statsOn_ = xcclParamCudaStats() != 0;
  if (exec_) execSetup();
  staged_ = xcclParamCudaStaging() != 0 && !exec_;
  // Without it the ready mark of a staged operation becomes a host function.
  if (staged_) writeValue_ = driverEntry("cuStreamWriteValue32");
  XCCL_INFO(INIT, "cuda:", ordinal, " (", busId_, "): stream holds by ",
            exec_ ? strCat("executor kernels (", execBlocks_, " blocks)")
                  : std::string(waitValue_ ? "cuStreamWaitValue32" : "a spin kernel"),
            staged_ ? strCat("; collectives staged through pinned host memory (ready mark by ",
                             writeValue_ ? "cuStreamWriteValue32" : "a host function",
                             "; XCCL_CUDA_STAGING=0 runs them on the GPU)")
                    : std::string("; collectives run on the GPU (XCCL_CUDA_STAGING=0)"),
            hostPointersWork_ ? "" : "; registered host memory has its own GPU addresses");
}

CudaDevice::~CudaDevice() {
  if (statsOn_) {
    static const char* names[kStats] = {"copy", "reduce", "scale", "stream wait", "alloc", "hold"};
    std::fprintf(stderr, "xccl cuda:%d stats (pid %d):", ordinal_, static_cast<int>(getpid()));
    for (int k = 0; k < kStats; ++k) {
      const auto calls = stats_[k].calls.load(), bytes = stats_[k].bytes.load();
      const double ms = stats_[k].ns.load() / 1e6;
      std::fprintf(stderr, " %s %llu calls %.3f ms %.1f MB (%.2f GB/s);", names[k],
                   static_cast<unsigned long long>(calls), ms, bytes / 1e6,
                   ms > 0 ? bytes / 1e6 / ms : 0.0);
    }
    std::fprintf(stderr, "\n");
  }
  // At process exit the runtime may be gone already: errors here are ignored.
  for (Hold* h : holds_) {
    if (h->passed) cudaEventDestroy(h->passed);
    if (h->flag) cudaFreeHost(h->flag);
    if (h->mailbox) cudaFreeHost(h->mailbox);
    delete h;
  }
  if (execWords_) cudaFree(execWords_);
  stageFreeAll();
}

int CudaDevice::currentOrdinal() {
  if (deviceCount() == 0) {
    throw InvalidUsage(
        "no CUDA device: no GPU or no driver on this machine (a build with CUDA "
        "runs without one, but the cuda device needs it)");
  }
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  return dev;
}

void CudaDevice::current() const { check(cudaSetDevice(ordinal_), "cudaSetDevice"); }

void* CudaDevice::workStream() const {
  auto& s = tlsStreams.byDevice[ordinal_];
  if (s == nullptr) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}

void CudaDevice::finish(int err, const char* what) const {
  check(static_cast<cudaError_t>(err), what);
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(workStream())), what);
}

// Temporaries of a collective come and go on the progress thread while user streams are
// held. cudaFree synchronizes the whole device, so it would wait for a stream that is held
// until this very collective completes: a deadlock. The stream-ordered allocator on the
// thread's work stream never waits for other streams.
void* CudaDevice::alloc(size_t bytes) {
  Timed t(statsOn_, stats_[kStatAlloc], bytes);
  current();
  void* p = nullptr;
  auto ws = static_cast<cudaStream_t>(workStream());
  check(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, ws), "cudaMallocAsync");
  check(cudaStreamSynchronize(ws), "cudaMallocAsync");  // usable from any stream
  return p;
}

void CudaDevice::free(void* ptr) {
  if (ptr == nullptr) return;
  current();
  check(cudaFreeAsync(ptr, static_cast<cudaStream_t>(workStream())), "cudaFreeAsync");
}

void CudaDevice::registerStaging(void* ptr, size_t bytes) {
  current();
  std::lock_guard<std::mutex> g(mu_);
  if (staging_.count(static_cast<const char*>(ptr))) return;
  cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    cudaGetLastError();  // someone else registered it: usable all the same
  } else {
    check(e, "cudaHostRegister of a staging ring");
  }
  void* dev = nullptr;
  check(cudaHostGetDevicePointer(&dev, ptr, 0), "cudaHostGetDevicePointer");
  staging_[static_cast<const char*>(ptr)] = {bytes, static_cast<const char*>(dev)};
}

void CudaDevice::unregisterStaging(void* ptr) {
  std::lock_guard<std::mutex> g(mu_);
  if (staging_.erase(static_cast<const char*>(ptr)) == 0) return;
  current();
  if (cudaHostUnregister(ptr) != cudaSuccess) cudaGetLastError();
}

const void* CudaDevice::deviceView(const void* p) const {
  if (hostPointersWork_) return p;
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> g(mu_);
  auto it = staging_.upper_bound(c);
  if (it == staging_.begin()) return p;
  --it;
  if (c >= it->first + it->second.first) return p;  // not staging: device memory
  return it->second.second + (c - it->first);
}

void CudaDevice::copy(void* dst, const void* src, size_t bytes, CopyKind) {
  if (bytes == 0) return;
  Timed t(statsOn_, stats_[kStatCopy], bytes);
  if (execStep(cuda::kExecCopy, xcclUint8, xcclSum, bytes, dst, src, nullptr, 0)) return;
  current();
  finish(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(workStream())),
      "cudaMemcpyAsync");
}

void CudaDevice::reduce(void* dst, const void* a, const void* b, size_t count, xcclDataType_t dtype,
                        xcclRedOp_t op) {
  XCCL_CHECK(opSupported(dtype, op) && op != xcclAvg && op != xcclPremulSum, "reduce: op ",
             static_cast<int>(op), " is not an element-wise reduction for dtype ",
             static_cast<int>(dtype));
  Timed t(statsOn_, stats_[kStatReduce], count * dtypeSize(dtype));
  if (count == 0) return;
  if (execStep(cuda::kExecReduce, dtype, op, count, dst, a, b, 0)) return;
  current();
  finish(cuda::launchReduce(dst, deviceView(a), deviceView(b), count, dtype, op,
                            static_cast<cudaStream_t>(workStream())),
         "reduce kernel");
}

void CudaDevice::scale(void* dst, const void* src, size_t count, xcclDataType_t dtype,
                       const void* scalar) {
  XCCL_CHECK_ARG(dtypeSize(dtype) != 0 && dtype != xcclBool, "scale: not defined for dtype ",
                 static_cast<int>(dtype));
  Timed t(statsOn_, stats_[kStatScale], count * dtypeSize(dtype));
  if (count == 0) return;
  uint64_t bits = 0;  // the scalar's bytes, as the executor reads them
  std::memcpy(&bits, scalar, dtypeSize(dtype));
  if (execStep(cuda::kExecScale, dtype, xcclSum, count, dst, src, nullptr, bits)) return;
  current();
  finish(cuda::launchScale(dst, deviceView(src), count, dtype, scalar,
                           static_cast<cudaStream_t>(workStream())),
         "scale kernel");
}

void CudaDevice::divide(void* dst, size_t count, xcclDataType_t dtype, int64_t divisor) {
  XCCL_CHECK(divisor != 0, "divide by zero");
  XCCL_CHECK_ARG(dtypeSize(dtype) != 0 && dtype != xcclBool, "divide: not defined for dtype ",
                 static_cast<int>(dtype));
  Timed t(statsOn_, stats_[kStatScale], count * dtypeSize(dtype));
  if (count == 0) return;
  if (execStep(cuda::kExecDivide, dtype, xcclSum, count, dst, nullptr, nullptr,
               static_cast<uint64_t>(divisor))) {
    return;
  }
  current();
  finish(cuda::launchDivide(dst, count, dtype, divisor, static_cast<cudaStream_t>(workStream())),
         "divide kernel");
}

// The capture streamHold links its hold to: enqueue() captures, then holds, on one thread.
thread_local void* tlsLastCapture = nullptr;

void* CudaDevice::streamCapture(xcclStream_t stream) {
  current();
  auto c = std::make_unique<Capture>();
  c->stream = static_cast<cudaStream_t>(stream);
  if (Stage* s = currentStage()) {  // staged: a mark in host memory instead of an event
    stageMark(s, c->stream);
    c->ready = s->ready;
    tlsLastCapture = c.get();
    return c.release();
  }
  check(cudaEventCreateWithFlags(&c->event, cudaEventDisableTiming), "cudaEventCreate");
  cudaError_t e = cudaEventRecord(c->event, c->stream);
  if (e != cudaSuccess) {
    cudaEventDestroy(c->event);
    fail(e, "cudaEventRecord on the caller's stream (is it a stream of this device?)");
  }
  tlsLastCapture = c.get();
  return c.release();
}

void CudaDevice::streamWait(void* token, const std::atomic<bool>& abort) {
  Timed t(statsOn_, stats_[kStatWait], 0);
  auto* c = static_cast<Capture*>(token);
  if (c == nullptr) return;
  if (c->ready != nullptr) {
    waitStaged(c->ready, abort);
    return;
  }
  if (c->hold != nullptr && c->hold->exec) {
    execWaitStarted(c);
    return;
  }
  check(cudaEventSynchronize(c->event),
        "cudaEventSynchronize (the work queued before the collective)");
}

void CudaDevice::streamRelease(void* token) {
  auto* c = static_cast<Capture*>(token);
  if (c == nullptr) return;
  if (tlsLastCapture == c) tlsLastCapture = nullptr;
  if (c->event != nullptr) cudaEventDestroy(c->event);
  delete c;
}

void* CudaDevice::streamHold(xcclStream_t stream, const char* /*label*/) {
  Timed t(statsOn_, stats_[kStatHold], 0);
  current();
  Hold* h = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (Hold* c : holds_) {
      if (!c->busy && cudaEventQuery(c->passed) == cudaSuccess) {
        h = c;
        break;
      }
    }
    if (h == nullptr) {
      cudaGetLastError();  // a query that said "not ready" leaves nothing sticky, but be sure
      auto fresh = std::make_unique<Hold>();
      check(cudaHostAlloc(reinterpret_cast<void**>(&fresh->flag), sizeof(uint32_t),
                          cudaHostAllocMapped | cudaHostAllocPortable),
            "cudaHostAlloc of a hold flag");
      check(cudaHostGetDevicePointer(&fresh->devFlag, fresh->flag, 0), "cudaHostGetDevicePointer");
      check(cudaEventCreateWithFlags(&fresh->passed, cudaEventDisableTiming), "cudaEventCreate");
      h = fresh.release();
      holds_.push_back(h);
    }
    h->busy = true;
    h->exec = exec_ && execPrepare(h);
  }
  auto s = static_cast<cudaStream_t>(stream);
  auto* capture = static_cast<Capture*>(tlsLastCapture);
  tlsLastCapture = nullptr;
  if (h->exec) {
    execLaunch(h, s);
    if (capture != nullptr && capture->stream == s) capture->hold = h;
    check(cudaEventRecord(h->passed, s), "cudaEventRecord after a hold");
    return h;
  }
  __atomic_store_n(h->flag, 0u, __ATOMIC_RELEASE);
  bool waiting = false;
  if (waitValue_ != nullptr) {
    auto fn = reinterpret_cast<WaitValue32Fn>(waitValue_);
    waiting = fn(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(h->devFlag), 1,
                 CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS;
  }
  const auto* word = static_cast<const volatile uint32_t*>(h->devFlag);
  if (!waiting) {
    check(cuda::launchWaitFlag(word, trapFailed_, s), "hold kernel");
  } else if (trapFailed_) {
    check(cuda::launchCheckFlag(word, s), "hold check kernel");
  }
  if (Stage* st = takeStage()) stageFinish(st, s);  // the outputs back, behind the hold
  check(cudaEventRecord(h->passed, s), "cudaEventRecord after a hold");
  return h;
}

void CudaDevice::streamResume(void* token) {
  auto* h = static_cast<Hold*>(token);
  if (h == nullptr) return;
  if (h->exec) {
    execStop(h, 1);
    return;
  }
  __atomic_store_n(h->flag, 1u, __ATOMIC_RELEASE);
  h->busy = false;
}

void CudaDevice::streamFail(void* token, const std::string& why) {
  auto* h = static_cast<Hold*>(token);
  if (h == nullptr) return;
  if (!trapFailed_) {
    XCCL_WARN(COLL, "cuda:", ordinal_, ": ", why,
              "; the stream goes on (XCCL_CUDA_FAILED_HOLD=release): its outputs are not results");
    streamResume(token);
    return;
  }
  XCCL_WARN(COLL, "cuda:", ordinal_, ": ", why,
            "; faulting the CUDA context behind the hold so that no stream consumes the outputs "
            "(XCCL_CUDA_FAILED_HOLD=trap): this process's later CUDA calls fail");
  if (h->exec) {
    execStop(h, 2);
    return;
  }
  __atomic_store_n(h->flag, 2u, __ATOMIC_RELEASE);
  h->busy = false;
}

}  // namespace xccl
