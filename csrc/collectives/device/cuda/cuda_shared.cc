// The CUDA device's shared memory (cuda_device.h, "shared"): payload lanes in device memory
// exported with CUDA IPC, opened by the peer processes of this host, and by pointer by ranks
// of this process (CUDA IPC refuses a handle in the process that made it).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "common/error.h"
#include "common/log.h"
#include "cuda_device.h"

namespace xccl {

namespace {

[[noreturn]] void fail(cudaError_t e, const char* what) {
  cudaGetLastError();
  throw Error(ErrorKind::kUnhandled,
              strCat("CUDA ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(e, what);
}

// Shareable memory this process allocated, by handle text: a rank of this process that opens
// it (ranks as threads, xccl-tests -g) uses the pointer, since CUDA IPC refuses to open a
// handle in the process that made it.
struct LocalShared {
  void* ptr;
  int device;
};
std::mutex localMu;
std::map<std::string, LocalShared> localShared;

std::string toHex(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    s += digits[b[i] >> 4];
    s += digits[b[i] & 15];
  }
  return s;
}

bool fromHex(const std::string& s, void* out, size_t n) {
  if (s.size() != 2 * n) return false;
  auto* b = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    b[i] = static_cast<unsigned char>(v);
  }
  return true;
}

}  // namespace

void* CudaDevice::allocShared(size_t bytes, std::string* handle) {
  // cudaMalloc, not the pool allocator: IPC exports only such memory. Made at communicator
  // creation and freed at its destruction, when none of its holds is pending.
  current();
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc of a payload lane");
  cudaIpcMemHandle_t h{};
  cudaError_t e = cudaIpcGetMemHandle(&h, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    cudaFree(p);
    XCCL_INFO(SHM, "cuda:", ordinal_, ": no CUDA IPC (", cudaGetErrorString(e),
              "); payloads go through host rings");
    return nullptr;
  }
  *handle = toHex(&h, sizeof(h));
  std::lock_guard<std::mutex> g(localMu);
  localShared[*handle] = LocalShared{p, ordinal_};
  return p;
}

void* CudaDevice::openShared(const std::string& handle, int ownerPid, size_t) {
  current();
  if (ownerPid == static_cast<int>(getpid())) {
    LocalShared local{};
    {
      std::lock_guard<std::mutex> g(localMu);
      auto it = localShared.find(handle);
      XCCL_CHECK(it != localShared.end(),
                 "cuda: a shared-memory handle of this process that it "
                 "did not make");
      local = it->second;
    }
    if (local.device != ordinal_) {
      int can = 0;
      cudaDeviceCanAccessPeer(&can, ordinal_, local.device);
      if (!can) {
        throw InvalidUsage(strCat("cuda:", ordinal_, " cannot read cuda:", local.device,
                                  "'s memory (no peer access): set XCCL_SHM_LANE=0"));
      }
      cudaError_t e = cudaDeviceEnablePeerAccess(local.device, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
      } else {
        check(e, "cudaDeviceEnablePeerAccess");
      }
    }
    return local.ptr;
  }
  cudaIpcMemHandle_t h{};
  if (!fromHex(handle, &h, sizeof(h))) {
    throw RemoteError(strCat("cuda: malformed IPC handle from pid ", ownerPid));
  }
  void* p = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw InvalidUsage(strCat("cuda:", ordinal_, ": cannot map pid ", ownerPid,
                              "'s device memory (cudaIpcOpenMemHandle: ", cudaGetErrorString(e),
                              "); set XCCL_SHM_LANE=0 to stage through host memory"));
  }
  std::lock_guard<std::mutex> g(mu_);
  ipcOpened_.insert(p);
  return p;
}

void CudaDevice::closeShared(void* ptr, size_t, bool owner) {
  if (ptr == nullptr) return;
  if (owner) {
    {
      std::lock_guard<std::mutex> g(localMu);
      for (auto it = localShared.begin(); it != localShared.end(); ++it) {
        if (it->second.ptr == ptr) {
          localShared.erase(it);
          break;
        }
      }
    }
    current();
    if (cudaFree(ptr) != cudaSuccess) cudaGetLastError();
    return;
  }
  std::lock_guard<std::mutex> g(mu_);
  if (ipcOpened_.erase(ptr) == 0) return;  // this process's own memory, opened by pointer
  current();
  if (cudaIpcCloseMemHandle(ptr) != cudaSuccess) cudaGetLastError();
}

}  // namespace xccl
