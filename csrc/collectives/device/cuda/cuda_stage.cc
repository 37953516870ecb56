// The CUDA device's staging through host memory (XCCL_CUDA_STAGING=1, the default; the seam
// is Device::stagesThroughHost in device.h, the ranges are the core's, core/stage.cc).
//
// Why: with the steps of a collective as CUDA calls of the progress thread, the caller's stream
// held until the collective is done, and another thread loading a module (torch compiling and
// loading a kernel at its first use, or any lazily loaded kernel), the load waits for the held
// stream while holding the context, the progress thread's next CUDA call waits for the load,
// and nothing moves again (measured on an H100 and an H200, docs/CUDA.md). NCCL avoids it by
// running the whole collective inside a kernel queued on the caller's stream; here everything
// the GPU does for an operation is queued by the enqueuing thread, before any such load, and
// the progress thread touches host memory only:
//
//   caller's stream:  copies of the inputs into pinned host memory (stageIn)
//                     write 1 to the stage's ready word (cuStreamWriteValue32)   <- streamCapture
//                     wait for the hold's word (cuStreamWaitValue32 or a spin kernel) <- streamHold
//                     copies of the outputs back (stageOut), then the stage's done event
//   progress thread:  waits for the ready word (a load of host memory), runs the collective on
//                     the host copy with the host device, sets the hold's word.
//
// A stage is reused once its done event completed; stages are never freed before the device
// (cudaFreeHost would wait for the whole device, held streams included). Their memory is the
// host device's peerable memory (a memfd), registered with CUDA for DMA, so that the ranks of
// a host read each other's stages in place, as xcclMemAlloc memory.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <utility>

#include "common/error.h"
#include "common/log.h"
#include "cuda_hold.h"

namespace xccl {
namespace {

void checkStage(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw Error(ErrorKind::kUnhandled,
              strCat("CUDA ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

using WriteValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// The operation this thread is enqueuing: stageBegin sets it, streamCapture marks it,
// streamHold finishes it. The copies back wait here between stageOut and that hold.
thread_local CudaDevice::Stage* tlsStage = nullptr;
thread_local std::vector<Device::StageCopy> tlsStageOut;

size_t roundedStage(size_t bytes) {
  size_t n = 64 << 10;
  while (n < bytes) n <<= 1;
  return n;
}

}  // namespace

CudaDevice::Stage* CudaDevice::currentStage() { return tlsStage; }

CudaDevice::Stage* CudaDevice::takeStage() {
  Stage* s = tlsStage;
  tlsStage = nullptr;
  return s;
}

char* CudaDevice::stageBegin(xcclStream_t, size_t bytes, Device& engine) {
  current();
  Stage* pick = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (Stage* s : stages_) {
      if (s->busy || s->bytes < bytes) continue;
      const cudaError_t e = cudaEventQuery(s->done);  // a stream still copying out of it?
      if (e != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      if (pick == nullptr || s->bytes < pick->bytes) pick = s;
    }
    if (pick == nullptr) {
      auto s = std::make_unique<Stage>();
      checkStage(cudaHostAlloc(reinterpret_cast<void**>(&s->ready), 64,
                               cudaHostAllocMapped | cudaHostAllocPortable),
                 "cudaHostAlloc of a stage's ready word");
      checkStage(cudaHostGetDevicePointer(&s->readyDev, s->ready, 0), "cudaHostGetDevicePointer");
      checkStage(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming), "cudaEventCreate");
      if (bytes > 0) {  // peerable host memory (peers read it in place), pinned for DMA
        s->bytes = roundedStage(bytes);
        s->host = static_cast<char*>(engine.allocPeerable(s->bytes));
        const cudaError_t e = cudaHostRegister(s->host, s->bytes, cudaHostRegisterPortable);
        if (e != cudaSuccess) {
          engine.freePeerable(s->host);
          checkStage(e, "cudaHostRegister of a staging buffer");
        }
      }
      pick = s.release();
      stages_.push_back(pick);
    }
    pick->busy = true;
  }
  __atomic_store_n(pick->ready, 0u, __ATOMIC_RELEASE);
  tlsStage = pick;
  tlsStageOut.clear();
  return pick->host;
}

void CudaDevice::stageIn(xcclStream_t stream, const std::vector<StageCopy>& copies) {
  auto s = static_cast<cudaStream_t>(stream);
  for (const StageCopy& c : copies) {
    checkStage(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, s),
               "cudaMemcpyAsync of an input into its stage (is the stream of this device?)");
  }
}

void CudaDevice::stageOut(std::vector<StageCopy>&& copies) { tlsStageOut = std::move(copies); }

void CudaDevice::stageMark(Stage* s, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (writeValue_ != nullptr) {
    const CUresult r = reinterpret_cast<WriteValue32Fn>(writeValue_)(
        reinterpret_cast<CUstream>(st), reinterpret_cast<CUdeviceptr>(s->readyDev), 1, 0);
    XCCL_CHECK(r == CUDA_SUCCESS, "cuStreamWriteValue32 of a stage's ready word failed (", r, ")");
    return;
  }
  // Without stream memory operations: a host function, run by the driver's own thread.
  checkStage(
      cudaLaunchHostFunc(
          st, [](void* w) { __atomic_store_n(static_cast<uint32_t*>(w), 1u, __ATOMIC_RELEASE); },
          s->ready),
      "cudaLaunchHostFunc of a stage's ready mark");
}

void CudaDevice::stageFinish(Stage* s, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  std::vector<StageCopy> out = std::move(tlsStageOut);
  tlsStageOut.clear();
  for (const StageCopy& c : out) {
    checkStage(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, st),
               "cudaMemcpyAsync of an output from its stage");
  }
  checkStage(cudaEventRecord(s->done, st), "cudaEventRecord after a stage's copies back");
  std::lock_guard<std::mutex> g(mu_);
  s->busy = false;
}

void CudaDevice::stageFreeAll() {
  for (Stage* s : stages_) {
    if (s->done) cudaEventDestroy(s->done);
    if (s->host) cudaHostUnregister(s->host);  // its memfd goes with the process
    if (s->ready) cudaFreeHost(s->ready);
    delete s;
  }
  stages_.clear();
}

}  // namespace xccl
