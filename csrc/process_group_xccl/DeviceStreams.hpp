// DeviceStreams.hpp — accelerator streams and events as the backend sees them: xdev
// (PrivateUse1) and CUDA, the two devices whose tensors the backend runs on their own
// communicator, ordered on the caller's stream.
//
// The backend links neither the xdev extension (torch_xccl._xdev_C) nor torch's CUDA
// libraries: it reaches a device's streams through c10's generic guard for the device type
// (current stream, pool streams, stream guards, recordStream into the caching allocator) and
// turns a c10::Stream into the runtime handle libxccl takes: for xdev the stream id is the
// xdevStream_t (csrc/torch_xdev/XdevStream.h), for CUDA c10 gives the cudaStream_t
// (Stream::native_handle). Events: xdev's own runtime events (libxdev is linked), c10::Event
// for CUDA. On a torch without CUDA no CUDA tensor exists, so the CUDA branches never run.
#pragma once

#include <memory>
#include <optional>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include "xdev_runtime.h"

namespace torch_xccl {

bool isXdev(const c10::Device& d);
// xdev or CUDA: a device whose tensors run on the group's device communicator.
bool isAccelerator(const c10::Device& d);
bool onAccelerator(const at::Tensor& t);

void* nativeStream(const c10::Stream& s);         // xdevStream_t or cudaStream_t
c10::Stream currentStream(const c10::Device& d);  // the calling thread's current stream
c10::Stream poolStream(const c10::Device& d);     // a stream from the device's pool
// The caching allocator does not hand t's memory out again until `s` passes the work queued
// on it so far (Tensor.record_stream).
void recordStream(const at::Tensor& t, const c10::Stream& s);

// An event of one device (timing: it can be an end of elapsedMs), destroyed with the object.
class DeviceEvent {
 public:
  explicit DeviceEvent(const c10::Device& d, bool timing = false);
  ~DeviceEvent();
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;

  void record(const c10::Stream& s);
  // `s` waits (on the device) for the work this event marks; the host does not block.
  void block(const c10::Stream& s);
  bool query();        // the marked work is done
  void synchronize();  // the host waits for it
  // Milliseconds from this event to `end`, both timing events whose work is done.
  float elapsedMs(const DeviceEvent& end) const;

 private:
  xdevEvent_t ev_ = nullptr;       // xdev
  std::optional<c10::Event> c10_;  // CUDA
};

}  // namespace torch_xccl
