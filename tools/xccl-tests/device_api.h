// The device a run's buffers and streams belong to (-D): "host" (malloc, no streams), "xdev"
// (libxdev: device memory the host can address, xdev streams) or "cuda" (CUDA runtime, in
// builds with XCCL_WITH_CUDA: device memory the host cannot address, so buffers keep host
// mirrors that are copied in before an operation and out before checking).
#pragma once

#include <memory>
#include <string>

#include "xccl.h"

namespace xt {

class DeviceApi {
 public:
  // Throws std::runtime_error for a kind this build lacks or a machine without the device.
  // memAlloc (--mem-alloc): buffers the peers of this host can map (host: xcclMemAlloc; xdev:
  // its device memory already is; cuda: refused, its device does not export buffers).
  static std::unique_ptr<DeviceApi> make(const std::string& kind, bool memAlloc = false);
  static const char* kinds();  // what -D accepts in this build, e.g. "host, xdev, cuda"
  virtual ~DeviceApi() = default;

  virtual xcclDeviceType_t type() const = 0;
  virtual bool hostAddressable() const { return true; }
  virtual int count() { return 1; }  // devices of this kind
  virtual void setDevice(int) {}
  virtual void* streamCreate() { return nullptr; }
  virtual void streamDestroy(void*) {}
  virtual void streamSync(void*) {}
  virtual void* alloc(size_t bytes);
  virtual void free(void* p);
  // Only for devices that are not host-addressable.
  virtual void copyIn(void* /*device*/, const void* /*host*/, size_t /*bytes*/) {}
  virtual void copyOut(void* /*host*/, const void* /*device*/, size_t /*bytes*/) {}
};

}  // namespace xt
