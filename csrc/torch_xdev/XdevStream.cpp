#include "XdevStream.h"

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "XdevException.h"
#include "XdevFunctions.h"

namespace xdev_torch {
namespace {

constexpr int kMaxDevices = 64;

struct DevicePool {
  std::once_flag created;
  std::array<xdevStream_t, kStreamPoolSize> streams{};
  std::atomic<uint32_t> next{0};
};

DevicePool& pool(c10::DeviceIndex device) {
  static std::array<DevicePool, kMaxDevices> pools;
  TORCH_CHECK(device < kMaxDevices, "xdev: at most ", kMaxDevices, " devices are supported");
  DevicePool& p = pools[device];
  std::call_once(p.created, [&] {
    DeviceSwitch guard(device);  // a stream belongs to the device current at creation
    for (auto& s : p.streams) {
      XDEV_CHECK(xdevStreamCreate(&s));
    }
  });
  return p;
}

// Per thread, per device: the current stream id (0 = default).
thread_local std::array<c10::StreamId, kMaxDevices> tlsCurrent{};

c10::StreamId streamIdOf(xdevStream_t s) {
  return static_cast<c10::StreamId>(reinterpret_cast<uintptr_t>(s));
}

c10::Stream makeStream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kXdev, device), id);
}

}  // namespace

xdevStream_t nativeStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kXdev, "xdev: expected an xdev stream, got a stream on ",
              stream.device());
  checkDeviceIndex(stream.device_index());
  const c10::StreamId id = stream.id();
  if (id == 0) {
    // The NULL stream means "the current device's default stream": resolve it to the
    // stream's own device explicitly through the pool owner's device switch at use sites.
    return nullptr;
  }
  // The id is the runtime handle (see XdevStream.h); only the device's pool streams are valid.
  for (xdevStream_t s : pool(stream.device_index()).streams) {
    if (reinterpret_cast<uintptr_t>(s) == static_cast<uintptr_t>(id)) return s;
  }
  TORCH_CHECK(false, "xdev: unknown stream id ", id, " on ", stream.device());
}

c10::Stream defaultStream(c10::DeviceIndex device) { return makeStream(resolveDevice(device), 0); }

c10::Stream currentStream(c10::DeviceIndex device) {
  device = resolveDevice(device);
  return makeStream(device, tlsCurrent[device]);
}

c10::Stream streamFromPool(c10::DeviceIndex device) {
  device = resolveDevice(device);
  claimAccelerator();  // a new xdev stream (torch.Stream(device="xdev")) is using xdev
  DevicePool& p = pool(device);
  const uint32_t k = p.next.fetch_add(1) % kStreamPoolSize;
  return makeStream(device, streamIdOf(p.streams[k]));
}

c10::Stream exchangeStream(const c10::Stream& stream) {
  (void)nativeStream(stream);  // validates
  claimAccelerator();
  const c10::DeviceIndex device = stream.device_index();
  c10::Stream previous = makeStream(device, tlsCurrent[device]);
  tlsCurrent[device] = stream.id();
  return previous;
}

xdevStream_t currentNativeStream(c10::DeviceIndex device) {
  return nativeStream(currentStream(device));
}

void synchronizeStream(const c10::Stream& stream) {
  xdevStream_t native = nativeStream(stream);
  DeviceSwitch guard(stream.device_index());  // NULL resolves to this device's default stream
  XDEV_CHECK(xdevStreamSynchronize(native));
}

}  // namespace xdev_torch
