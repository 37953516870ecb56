// -D cuda (builds with XCCL_WITH_CUDA).
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "device_api.h"

namespace xt {
namespace {

void ccheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(e));
}

class CudaApi : public DeviceApi {
 public:
  CudaApi() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      throw std::runtime_error(std::string("-D cuda: no CUDA device (") +
                               (e != cudaSuccess ? cudaGetErrorString(e) : "none visible") + ")");
    }
  }
  xcclDeviceType_t type() const override { return xcclDeviceCuda; }
  bool hostAddressable() const override { return false; }
  int count() override {
    int n = 0;
    ccheck(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    return n;
  }
  void setDevice(int d) override { ccheck(cudaSetDevice(d), "cudaSetDevice"); }
  void* streamCreate() override {
    cudaStream_t s = nullptr;
    ccheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    return s;
  }
  void streamDestroy(void* s) override { cudaStreamDestroy(static_cast<cudaStream_t>(s)); }
  void streamSync(void* s) override {
    ccheck(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), "cudaStreamSynchronize");
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    ccheck(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void free(void* p) override { cudaFree(p); }
  void copyIn(void* device, const void* host, size_t bytes) override {
    ccheck(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
    // From pageable memory the call returns before the DMA lands, and the collective's
    // non-blocking stream does not wait for the legacy stream that carries it.
    ccheck(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (legacy stream)");
  }
  void copyOut(void* host, const void* device, size_t bytes) override {
    ccheck(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
  }
};

}  // namespace

std::unique_ptr<DeviceApi> makeCudaApi() { return std::make_unique<CudaApi>(); }

}  // namespace xt
