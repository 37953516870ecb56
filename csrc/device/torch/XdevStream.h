// Streams: how a c10::Stream (device, id) names an xdevStream_t.
//
// Id 0 is the device's default stream (the runtime's NULL stream). Ids 1..kPoolSize name the
// device's pool of streams, created on first use and handed out round robin by
// torch.Stream(device="xdev") / torch.xdev.Stream(), as CUDA's stream pool does. Each thread
// has a current stream per device (default stream until set).
#pragma once

#include <c10/core/Stream.h>

#include <xdev_runtime.h>

namespace xdev_torch {

constexpr int kStreamPoolSize = 32;

// The runtime handle; checks that the stream is an xdev stream with a valid id.
xdevStream_t nativeStream(const c10::Stream& stream);

c10::Stream defaultStream(c10::DeviceIndex device);   // -1: current device
c10::Stream currentStream(c10::DeviceIndex device);   // -1: current device
c10::Stream streamFromPool(c10::DeviceIndex device);  // -1: current device
// Makes `stream` current for its device on this thread; returns the previous one.
c10::Stream exchangeStream(const c10::Stream& stream);

xdevStream_t currentNativeStream(c10::DeviceIndex device);
void synchronizeStream(const c10::Stream& stream);

}  // namespace xdev_torch
