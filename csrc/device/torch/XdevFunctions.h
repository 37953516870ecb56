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
