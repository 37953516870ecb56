// The table of device kinds: the one place a device is registered. Selection (getDevice),
// topology wiring and the xcclConfig_t deviceType all read it, so a vendor's device is its
// folder (csrc/collectives/device/<vendor>/, a Device subclass) plus one row here (and, for
// the C API, a value in xccl.h's xcclDeviceType_t).
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/error.h"
#include "common/param.h"
#include "device.h"
#include "host/host_device.h"
#include "host/xdev_device.h"
#if defined(XCCL_WITH_CUDA)
#include "cuda/cuda_device.h"
#endif

namespace xccl {

XCCL_PARAM_STR(DeviceKind, "DEVICE", "host")

namespace {

struct DeviceKindRow {
  const char* name;       // XCCL_DEVICE, xccl-tests -D, topology files
  xcclDeviceType_t type;  // the xcclConfig_t deviceType that selects it
  // The device with this ordinal (checks it); nullptr when this build lacks the kind.
  std::unique_ptr<Device> (*make)(int ordinal);
  int (*currentOrdinal)();   // the ordinal when the caller gives none
  DeviceWiring (*wiring)();  // nullptr: nothing to wire (host memory)
  const char* missing;       // why make is nullptr in this build
};

template <typename D>
std::unique_ptr<Device> make(int ordinal) {
  return std::make_unique<D>(ordinal);
}

int ordinalZero() { return 0; }

const DeviceKindRow kKinds[] = {
    {"host", xcclDeviceHost, make<HostDevice>, ordinalZero, nullptr, ""},
    {"xdev", xcclDeviceXdev, make<XdevDevice>, XdevDevice::currentOrdinal, XdevDevice::wiring, ""},
#if defined(XCCL_WITH_CUDA)
    {"cuda", xcclDeviceCuda, make<CudaDevice>, CudaDevice::currentOrdinal, CudaDevice::wiring, ""},
#else
    {"cuda", xcclDeviceCuda, nullptr, nullptr, nullptr,
     "this libxccl was built without CUDA (no nvcc at build time, or -DXCCL_WITH_CUDA=OFF)"},
#endif
};

std::string requestedKind(const std::string& requested) {
  return requested.empty() ? xcclParamDeviceKind() : requested;
}

const DeviceKindRow* findKind(const std::string& name) {
  for (const auto& row : kKinds) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

}  // namespace

const char* availableDeviceKinds() {
  static const std::string list = [] {
    std::string s;
    for (const auto& row : kKinds) {
      if (row.make != nullptr) s += (s.empty() ? "" : ", ") + std::string(row.name);
    }
    return s;
  }();
  return list.c_str();
}

const char* deviceKind(xcclDeviceType_t type) {
  if (type == xcclDeviceDefault) return "";
  for (const auto& row : kKinds) {
    if (row.type == type) return row.name;
  }
  throw Error(ErrorKind::kInvalidArgument, strCat("invalid deviceType ", static_cast<int>(type)));
}

Device& getDevice(const std::string& requested, int ordinal) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, std::unique_ptr<Device>> devices;
  const std::string kind = requestedKind(requested);
  const DeviceKindRow* row = findKind(kind);
  if (row == nullptr) {
    throw InvalidUsage(
        strCat("device kind '", kind,
               "' is not available in this build (available: ", availableDeviceKinds(), ")"));
  }
  if (row->make == nullptr) {
    throw InvalidUsage(strCat("device kind '", kind, "' is not available: ", row->missing));
  }
  std::lock_guard<std::mutex> lock(mu);
  const int ord = ordinal < 0 ? row->currentOrdinal() : ordinal;
  auto& slot = devices[{kind, ord}];
  if (!slot) slot = row->make(ord);  // the device checks its ordinal (and driver)
  return *slot;
}

Device& getDevice(int ordinal) { return getDevice("", ordinal); }

DeviceWiring deviceWiring(const std::string& requested) {
  const DeviceKindRow* row = findKind(requestedKind(requested));
  return row != nullptr && row->make != nullptr && row->wiring != nullptr ? row->wiring()
                                                                          : DeviceWiring();
}

}  // namespace xccl
