// The CUDA device's executor holds (exec.h): the host half. The kernel runs on the caller's
// stream; the progress thread waits for it to start (the collective's inputs are then ready),
// posts each copy or reduction into the hold's mailbox and spins until the kernel reports it
// done, and finally tells it to stop (the stream goes on) or to fault the context (a failed
// collective, XCCL_CUDA_FAILED_HOLD=trap). Between launch and stop the host makes no CUDA
// call, so nothing the application does to the context (a module load, a cudaFree, a
// synchronize) can wait on a held stream while the collective waits on it.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "cuda_hold.h"

namespace xccl {

// Blocks of the executor kernel (each 512 threads): the SMs a collective's copies and
// reductions run on while it is in flight.
XCCL_PARAM(CudaExecBlocks, "CUDA_EXEC_BLOCKS", 16, 1, 1024)

namespace {

// Executors a device can have queued at once (one arrival word each); beyond, holds fall
// back to cuStreamWaitValue32 / the spin kernel.
constexpr unsigned kExecWords = 1024;

// After this long without news from the kernel, ask CUDA whether the context still works
// (a fault elsewhere kills the executor, and its mailbox would never change). The query is
// a CUDA call, which the executor exists to avoid, so only rarely.
constexpr auto kHealthEvery = std::chrono::seconds(1);

void checkCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw Error(ErrorKind::kUnhandled,
              strCat("CUDA ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

// Throws when `ev`'s query reports an error (not "not ready"): the context has failed.
void checkHealth(cudaEvent_t ev, const char* waiting) {
  const cudaError_t e = cudaEventQuery(ev);
  if (e == cudaSuccess || e == cudaErrorNotReady) {
    if (e == cudaErrorNotReady) cudaGetLastError();
    return;
  }
  checkCuda(e, waiting);
}

uint32_t load(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

}  // namespace

void CudaDevice::execSetup() {
  execBlocks_ = static_cast<unsigned>(xcclParamCudaExecBlocks());
  checkCuda(cudaMalloc(reinterpret_cast<void**>(&execWords_), kExecWords * sizeof(unsigned)),
            "cudaMalloc of the executors' words");
  checkCuda(cudaMemset(execWords_, 0, kExecWords * sizeof(unsigned)),
            "cudaMemset of the executors' words");
  execFree_.clear();
  for (unsigned i = kExecWords; i-- > 0;) execFree_.push_back(i);
}

bool CudaDevice::execPrepare(Hold* h) {  // under mu_
  if (h->word < 0) {
    if (execFree_.empty()) {
      static bool told = false;
      if (!told) {
        told = true;
        XCCL_WARN(COLL, "cuda:", ordinal_, ": more than ", kExecWords,
                  " collectives queued on streams at once: the further ones hold their "
                  "streams by ",
                  waitValue_ ? "cuStreamWaitValue32" : "a spin kernel");
      }
      return false;
    }
    h->word = static_cast<int>(execFree_.back());
    execFree_.pop_back();
  }
  if (h->mailbox == nullptr) {
    void* mb = nullptr;
    checkCuda(
        cudaHostAlloc(&mb, sizeof(cuda::ExecMailbox), cudaHostAllocMapped | cudaHostAllocPortable),
        "cudaHostAlloc of an executor's mailbox");
    void* dev = nullptr;
    checkCuda(cudaHostGetDevicePointer(&dev, mb, 0), "cudaHostGetDevicePointer");
    h->mailbox = static_cast<cuda::ExecMailbox*>(mb);
    h->mailboxDev = static_cast<cuda::ExecMailbox*>(dev);
  }
  return true;
}

void CudaDevice::execLaunch(Hold* h, void* stream) {
  // The previous use of this hold has passed (streamHold checked its event): no kernel reads
  // the mailbox now.
  std::memset(static_cast<void*>(h->mailbox), 0, sizeof(cuda::ExecMailbox));
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  h->posted = 0;
  h->running = false;
  checkCuda(cuda::launchExec(h->mailboxDev, execWords_ + h->word, trapFailed_, execBlocks_,
                             static_cast<cudaStream_t>(stream)),
            "launching the executor kernel on the caller's stream");
}

void CudaDevice::execWaitStarted(Capture* c) {
  Hold* h = c->hold;
  Backoff backoff;
  auto lastNews = Clock::now();
  while (load(&h->mailbox->started) == 0) {
    backoff.idle();
    if (Clock::now() - lastNews >= kHealthEvery) {
      checkHealth(c->event, "the work queued before the collective");
      lastNews = Clock::now();
    }
  }
  std::lock_guard<std::mutex> g(execMu_);
  h->owner = std::this_thread::get_id();
  h->running = true;
  running_.push_back(h);
}

CudaDevice::Hold* CudaDevice::execRunning() const {
  if (!exec_) return nullptr;
  const auto me = std::this_thread::get_id();
  std::lock_guard<std::mutex> g(execMu_);
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if ((*it)->owner == me) return *it;
  }
  return nullptr;
}

bool CudaDevice::execStep(uint32_t kind, xcclDataType_t dtype, xcclRedOp_t op, size_t count,
                          void* dst, const void* a, const void* b, uint64_t scalar) {
  Hold* h = execRunning();
  if (h == nullptr) return false;
  cuda::ExecCommand c{};
  c.kind = kind;
  c.dtype = static_cast<uint32_t>(dtype);
  c.op = static_cast<uint32_t>(op);
  c.count = count;
  c.dst = reinterpret_cast<uintptr_t>(deviceView(dst));
  c.a = reinterpret_cast<uintptr_t>(deviceView(a));
  c.b = reinterpret_cast<uintptr_t>(deviceView(b));
  c.scalar = scalar;
  execPost(h, &c);
  return true;
}

void CudaDevice::execPost(Hold* h, const void* command) {
  cuda::ExecMailbox* mb = h->mailbox;
  std::memcpy(static_cast<void*>(&mb->cmd), command, sizeof(cuda::ExecCommand));
  const uint32_t k = ++h->posted;
  __atomic_store_n(&mb->posted, k, __ATOMIC_RELEASE);  // the command's words before this
  Backoff backoff;
  auto lastNews = Clock::now();
  while (load(&mb->completed) < k) {
    backoff.idle();
    if (Clock::now() - lastNews >= kHealthEvery) {
      checkHealth(h->passed, "the executor kernel (a step of the collective)");
      lastNews = Clock::now();
    }
  }
}

void CudaDevice::execStop(Hold* h, uint32_t how) {
  {
    std::lock_guard<std::mutex> g(execMu_);
    if (h->running) {
      running_.erase(std::find(running_.begin(), running_.end(), h));
      h->running = false;
    }
  }
  __atomic_store_n(&h->mailbox->stop, how, __ATOMIC_RELEASE);
  h->busy = false;  // reused once its `passed` event says the kernel has returned
}

}  // namespace xccl
