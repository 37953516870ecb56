// Device management: the thin, checked layer over xdevGetDeviceCount / xdevSetDevice that the
// guard, the hooks and the Python module share.
#pragma once

#include <c10/core/Device.h>

namespace xdev_torch {

constexpr c10::DeviceType kXdev = c10::DeviceType::PrivateUse1;

// Never throws (torch requires this of deviceCount); 0 when the runtime fails.
c10::DeviceIndex deviceCount() noexcept;
// Throws a clear error for an index outside [0, deviceCount()).
void checkDeviceIndex(c10::DeviceIndex index);
c10::DeviceIndex currentDevice();
void setDevice(c10::DeviceIndex index);
c10::DeviceIndex exchangeDevice(c10::DeviceIndex index);
// -1 means the current device.
c10::DeviceIndex resolveDevice(c10::DeviceIndex index);

// Whether this process uses xdev as torch's accelerator (docs/XDEV_TORCH.md, "xdev beside
// CPU-only programs"). Until it does, the hooks report xdev unavailable, so torch's accelerator
// checks (torch.accelerator.is_available(), torch._C._get_accelerator(), init_process_group()
// without a backend) answer as on a machine without one. Claimed at the first use of the
// device (selecting an xdev device, allocating on it), by torch.xdev.init(), or from the start
// with TORCH_XCCL_ACCELERATOR=xdev. Never given back.
bool acceleratorClaimed() noexcept;
void claimAccelerator() noexcept;

// RAII: switch the runtime's current device for a scope (no-op when already there).
class DeviceSwitch {
 public:
  explicit DeviceSwitch(c10::DeviceIndex index);
  ~DeviceSwitch();
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;

 private:
  c10::DeviceIndex previous_;
  bool switched_;
};

}  // namespace xdev_torch
