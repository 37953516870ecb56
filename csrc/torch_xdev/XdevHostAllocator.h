// Pinned host memory for xdev (tensor.pin_memory(), DataLoader(pin_memory=True)): blocks come
// from xdevHostAlloc, so the runtime reports them as Host memory (is_pinned()). A block that an
// asynchronous copy still reads or writes has an event recorded on the copy's stream
// (recordEvent); its free is deferred until the event has completed.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace xdev_torch {

at::HostAllocator* hostAllocator();
bool isPinned(const void* ptr);
// For asynchronous copies: keep the pinned block holding `ptr` alive until the work queued on
// `stream` so far has completed. No-op for memory that is not ours.
void recordHostUse(const at::DataPtr& ptr, const c10::Stream& stream);

}  // namespace xdev_torch
