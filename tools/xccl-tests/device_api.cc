#include "device_api.h"

#include <cstdlib>
#include <new>
#include <stdexcept>

#include "xdev_runtime.h"

namespace xt {

#if defined(XCCL_WITH_CUDA)
std::unique_ptr<DeviceApi> makeCudaApi();  // device_api_cuda.cc
#endif

namespace {

class HostApi : public DeviceApi {
 public:
  xcclDeviceType_t type() const override { return xcclDeviceDefault; }  // XCCL_DEVICE decides
};

void xcheck(xdevError_t e, const char* what) {
  if (e == xdevSuccess) return;
  throw std::runtime_error(std::string(what) + " failed: " + xdevGetErrorString(e) + ": " +
                           xdevGetLastErrorMessage());
}

class XdevApi : public DeviceApi {
 public:
  xcclDeviceType_t type() const override { return xcclDeviceXdev; }
  int count() override {
    int n = 0;
    xcheck(xdevGetDeviceCount(&n), "xdevGetDeviceCount");
    return n;
  }
  void setDevice(int d) override { xcheck(xdevSetDevice(d), "xdevSetDevice"); }
  void* streamCreate() override {
    xdevStream_t s = nullptr;
    xcheck(xdevStreamCreate(&s), "xdevStreamCreate");
    return s;
  }
  void streamDestroy(void* s) override { xdevStreamDestroy(static_cast<xdevStream_t>(s)); }
  void streamSync(void* s) override {
    xcheck(xdevStreamSynchronize(static_cast<xdevStream_t>(s)), "xdevStreamSynchronize");
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    xcheck(xdevMalloc(&p, bytes), "xdevMalloc");
    return p;
  }
  void free(void* p) override { xdevFree(p); }
};

// --mem-alloc on the host device: xcclMemAlloc memory, which peer ranks read in place.
class PeerableHostApi : public HostApi {
 public:
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (xcclMemAlloc(&p, bytes) != xcclSuccess) {
      throw std::runtime_error(std::string("xcclMemAlloc: ") + xcclGetLastError(nullptr));
    }
    return p;
  }
  void free(void* p) override { xcclMemFree(p); }
};

}  // namespace

void* DeviceApi::alloc(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, bytes) != 0) throw std::bad_alloc();
  return p;
}

void DeviceApi::free(void* p) { std::free(p); }

const char* DeviceApi::kinds() {
#if defined(XCCL_WITH_CUDA)
  return "host, xdev, cuda";
#else
  return "host, xdev";
#endif
}

std::unique_ptr<DeviceApi> DeviceApi::make(const std::string& kind, bool memAlloc) {
  if (kind == "host" && memAlloc) return std::make_unique<PeerableHostApi>();
  if (kind == "host") return std::make_unique<HostApi>();
  if (kind == "cuda" && memAlloc) {
    throw std::runtime_error(
        "--mem-alloc: the CUDA device does not export buffers for peer reads (docs/MEMORY.md)");
  }
  if (kind == "xdev") return std::make_unique<XdevApi>();
#if defined(XCCL_WITH_CUDA)
  if (kind == "cuda") return makeCudaApi();
#endif
  throw std::runtime_error("device '" + kind + "' is not available in this build (" + kinds() +
                           ")");
}

}  // namespace xt
