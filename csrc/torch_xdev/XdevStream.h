// Streams: how a c10::Stream (device, id) names an xdevStream_t.
//
// Id 0 is the device's default stream (the runtime's NULL stream). Any other id is the
// runtime handle itself (xdevStream_t as an integer) of one of the device's kStreamPoolSize
// pool streams, created on first use and handed out round robin by
// torch.Stream(device="xdev") / torch.xdev.Stream(), as CUDA's stream pool does. Because
// the id is the handle, code that sees only a c10::Stream (the xccl backend, which does not
// link this extension) gets the native stream as reinterpret_cast<xdevStream_t>(id).
// Each thread has a current stream per device (default stream until set).
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
