// DeviceStreams.hpp — xdev streams and events as the backend sees them.
//
// The backend does not link the xdev extension (torch_xccl._xdev_C): it reaches the device's
// streams through c10's generic guard for PrivateUse1 (current stream, pool streams, stream
// guards, recordStream into the caching allocator) and turns a c10::Stream into the runtime
// handle directly, because the xdev extension makes a stream's id its xdevStream_t
// (csrc/device/torch/XdevStream.h). Events are the runtime's own (libxdev is linked).
#pragma once

#include <memory>

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include "xdev_runtime.h"

namespace torch_xccl {

bool onXdev(const at::Tensor& t);
bool isXdev(const c10::Device& d);

xdevStream_t nativeStream(const c10::Stream& s);
c10::Stream currentStream(const c10::Device& d);  // the calling thread's current stream
c10::Stream poolStream(const c10::Device& d);     // a stream from the device's pool
// The caching allocator does not hand t's memory out again until `s` passes the work queued
// on it so far (Tensor.record_stream).
void recordStream(const at::Tensor& t, const c10::Stream& s);

// An xdev event of one device (created without timing), destroyed with the object.
class DeviceEvent {
 public:
  explicit DeviceEvent(const c10::Device& d);
  ~DeviceEvent();
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;

  void record(const c10::Stream& s);
  // `s` waits (on the device) for the work this event marks; the host does not block.
  void block(const c10::Stream& s);
  bool query();        // the marked work is done
  void synchronize();  // the host waits for it

 private:
  xdevEvent_t ev_ = nullptr;
};

}  // namespace torch_xccl
