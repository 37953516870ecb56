// PrivateUse1HooksInterface for xdev: what at::globalContext() and torch.accelerator ask of
// the device (availability, generators, pinned memory, pointers). Registered at library load.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "XdevException.h"
#include "XdevFunctions.h"
#include "XdevGenerator.h"
#include "XdevHostAllocator.h"

namespace xdev_torch {
namespace {

struct XdevHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  // Unavailable until the process uses xdev (XdevFunctions.h, acceleratorClaimed): torch asks
  // this to pick its accelerator (torch._C._get_accelerator(), so init_process_group() without
  // a backend), and a CPU-only program must get the answers of a machine without one.
  bool isAvailable() const override { return acceleratorClaimed() && deviceCount() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device) const override { return true; }
  void init() const override {}

  c10::DeviceIndex deviceCount() const override { return xdev_torch::deviceCount(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { setDevice(device); }
  c10::DeviceIndex getCurrentDevice() const override { return currentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return xdev_torch::exchangeDevice(device);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= xdev_torch::deviceCount()) {
      return currentDevice();
    }
    return xdev_torch::exchangeDevice(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return defaultGenerator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return newGenerator(device);
  }

  bool isPinnedPtr(const void* data) const override { return isPinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return hostAllocator(); }

  at::Device getDeviceFromPtr(void* data) const override {
    xdevPointerAttributes attr{};
    XDEV_CHECK(xdevPointerGetAttributes(&attr, data));
    TORCH_CHECK(attr.type == xdevMemoryTypeDevice, "xdev: pointer ", data,
                " is not xdev device memory");
    return at::Device(kXdev, static_cast<c10::DeviceIndex>(attr.device));
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

}  // namespace
}  // namespace xdev_torch

#include "XdevOps.h"

namespace xdev_torch {
namespace {

void XdevHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resizeStorageBytes(storage.unsafeGetStorageImpl(), newsize);
}

const bool registered [[maybe_unused]] = [] {
  at::RegisterPrivateUse1HooksInterface(new XdevHooks());
  return true;
}();

}  // namespace
}  // namespace xdev_torch
