#include "XdevFunctions.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "XdevException.h"

namespace xdev_torch {

[[noreturn]] void raiseRuntimeError(xdevError_t err, const char* call, const char* file, int line) {
  const char* detail = xdevGetLastErrorMessage();
  std::string message =
      c10::str("xdev error ", xdevGetErrorName(err), " (", xdevGetErrorString(err), ") in ", call,
               (detail && *detail) ? ": " : "", detail ? detail : "");
  (void)xdevGetLastError();  // consumed here, as CUDA's C10_CUDA_CHECK does
  if (err == xdevErrorMemoryAllocation) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, message);
  }
  if (err == xdevErrorStreamFailed) {
    // A collective this stream waited for failed (libxccl failed its hold): what the caller
    // was about to read is not a result. torch.distributed.DistBackendError, as the backend's
    // own errors are, and the failure first: it names the operation and the peer.
    std::string why = detail ? detail : "";
    const std::string mark = "has failed: ";
    const size_t at = why.find(mark);
    if (at != std::string::npos) why = why.substr(at + mark.size());
    TORCH_CHECK_WITH(DistBackendError, false, why,
                     " [xdev: the stream this read waits for failed (", call,
                     "); it stays failed until torch.xdev.clear_errors(): docs/RELIABILITY.md, "
                     "section 10]");
  }
  (void)file;
  (void)line;
  TORCH_CHECK(false, message);
}

c10::DeviceIndex deviceCount() noexcept {
  static const c10::DeviceIndex count = [] {
    int n = 0;
    if (xdevGetDeviceCount(&n) != xdevSuccess) {
      (void)xdevGetLastError();
      return c10::DeviceIndex(0);
    }
    return static_cast<c10::DeviceIndex>(n);
  }();
  return count;
}

namespace {

bool claimedByEnvironment() {
  const char* v = std::getenv("TORCH_XCCL_ACCELERATOR");
  return v != nullptr && std::strcmp(v, "xdev") == 0;
}

std::atomic<bool>& claimFlag() {
  static std::atomic<bool> claimed{claimedByEnvironment()};
  return claimed;
}

}  // namespace

bool acceleratorClaimed() noexcept { return claimFlag().load(std::memory_order_acquire); }

void claimAccelerator() noexcept { claimFlag().store(true, std::memory_order_release); }

// A RuntimeError, as torch's devices raise for a bad ordinal (CUDA: "invalid device ordinal").
void checkDeviceIndex(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < deviceCount(), "xdev: invalid device index ",
              static_cast<int>(index), ". The device index is out of range: there are ",
              static_cast<int>(deviceCount()),
              " xdev devices (valid: xdev:0 .. xdev:", deviceCount() - 1,
              "; XCCL_XDEV_COUNT sets how many)");
}

c10::DeviceIndex currentDevice() {
  int device = 0;
  XDEV_CHECK(xdevGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

void setDevice(c10::DeviceIndex index) {
  checkDeviceIndex(index);
  claimAccelerator();  // selecting an xdev device is using xdev
  XDEV_CHECK(xdevSetDevice(index));
}

c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) {
  checkDeviceIndex(index);
  claimAccelerator();  // every DeviceGuard on xdev comes here
  const c10::DeviceIndex previous = currentDevice();
  if (index != previous) {
    setDevice(index);
  }
  return previous;
}

c10::DeviceIndex resolveDevice(c10::DeviceIndex index) {
  if (index < 0) {
    return currentDevice();
  }
  checkDeviceIndex(index);
  return index;
}

DeviceSwitch::DeviceSwitch(c10::DeviceIndex index) : previous_(currentDevice()) {
  switched_ = index != previous_;
  if (switched_) {
    setDevice(index);
  }
}

DeviceSwitch::~DeviceSwitch() {
  if (switched_) {
    XDEV_WARN(xdevSetDevice(previous_));
  }
}

}  // namespace xdev_torch
