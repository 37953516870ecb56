// Device selection and the dtype/op support matrix.
#include "device.h"

#include <map>
#include <memory>
#include <mutex>

#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "dtype.h"
#include "host/host_device.h"
#include "host/xdev_device.h"
#if defined(XCCL_WITH_CUDA)
#include "cuda/cuda_device.h"
#endif

namespace xccl {

XCCL_PARAM_STR(DeviceKind, "DEVICE", "host")

size_t dtypeSize(xcclDataType_t dtype) {
  switch (dtype) {
    case xcclInt8:
    case xcclUint8:
    case xcclBool:
      return 1;
    case xcclFloat16:
    case xcclBfloat16:
      return 2;
    case xcclInt32:
    case xcclFloat32:
      return 4;
    case xcclInt64:
    case xcclFloat64:
      return 8;
    default:
      return 0;
  }
}

bool opSupported(xcclDataType_t dtype, xcclRedOp_t op) {
  if (dtypeSize(dtype) == 0 || op < 0 || op >= xcclNumOps) return false;
  switch (op) {
    case xcclSum:
    case xcclProd:
    case xcclMax:
    case xcclMin:
      return true;
    case xcclAvg:
    case xcclPremulSum:
      return dtype != xcclBool;
    case xcclBand:
    case xcclBor:
    case xcclBxor:
      return !isFloatType(dtype);
    default:
      return false;
  }
}

const char* availableDeviceKinds() {
#if defined(XCCL_WITH_CUDA)
  return "host, xdev, cuda";
#else
  return "host, xdev";
#endif
}

Device& getDevice(const std::string& requested, int ordinal) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, std::unique_ptr<Device>> devices;
  const std::string kind = requested.empty() ? xcclParamDeviceKind() : requested;
  std::lock_guard<std::mutex> lock(mu);
  if (kind == "host") {
    int ord = ordinal < 0 ? 0 : ordinal;
    auto& slot = devices[{kind, ord}];
    if (!slot) slot = std::make_unique<HostDevice>(ord);
    return *slot;
  }
  if (kind == "xdev") {
    int ord = ordinal < 0 ? XdevDevice::currentOrdinal() : ordinal;
    auto& slot = devices[{kind, ord}];
    if (!slot) slot = std::make_unique<XdevDevice>(ord);  // checks the ordinal
    return *slot;
  }
  if (kind == "cuda") {
#if defined(XCCL_WITH_CUDA)
    int ord = ordinal < 0 ? CudaDevice::currentOrdinal() : ordinal;
    auto& slot = devices[{kind, ord}];
    if (!slot) slot = std::make_unique<CudaDevice>(ord);  // checks driver and ordinal
    return *slot;
#else
    throw InvalidUsage(
        "device kind 'cuda' is not available: this libxccl was built without "
        "CUDA (no nvcc at build time, or -DXCCL_WITH_CUDA=OFF)");
#endif
  }
  throw InvalidUsage(strCat("device kind '", kind, "' is not available in this build (available: ",
                            availableDeviceKinds(), ")"));
}

Device& getDevice(int ordinal) { return getDevice("", ordinal); }

DeviceWiring deviceWiring(const std::string& requested) {
  const std::string kind = requested.empty() ? xcclParamDeviceKind() : requested;
  if (kind == "xdev") return XdevDevice::wiring();
#if defined(XCCL_WITH_CUDA)
  if (kind == "cuda") return CudaDevice::wiring();
#endif
  return DeviceWiring();
}

void* Device::openShared(const std::string&, int, size_t) {
  throw InvalidUsage(strCat("device ", name(), " cannot map a peer's shared memory"));
}

void Device::closeShared(void*, size_t, bool) {}

const void* Device::importBuffer(const PeerRef&, int, size_t) {
  throw RemoteError(
      strCat("a peer sent a peer-read frame, but device ", name(), " cannot map a peer's buffers"));
}

}  // namespace xccl
