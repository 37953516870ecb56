// C entry points: allocation, pointer attributes, copies and memset.
#include <cstring>

#include "runtime.h"
#include "status.h"

using xdev::api;
using xdev::Runtime;

namespace {

// Validates a copy's kind and both ranges (memory.h: device sides inside one allocation, host
// sides clear of device memory).
void checkCopy(xdev::Memory& mem, void* dst, const void* src, size_t bytes, xdevMemcpyKind kind) {
  XDEV_REQUIRE(kind >= xdevMemcpyHostToHost && kind <= xdevMemcpyDefault, xdevErrorInvalidValue,
               "unknown copy kind ", static_cast<int>(kind));
  if (bytes == 0) return;
  XDEV_REQUIRE(dst != nullptr && src != nullptr, xdevErrorInvalidValue, "NULL ",
               dst == nullptr ? "dst" : "src", " for ", bytes, " bytes");
  bool dstDevice = kind == xdevMemcpyHostToDevice || kind == xdevMemcpyDeviceToDevice;
  bool srcDevice = kind == xdevMemcpyDeviceToHost || kind == xdevMemcpyDeviceToDevice;
  if (kind == xdevMemcpyDefault) {
    dstDevice = mem.attributes(dst).type == xdevMemoryTypeDevice;
    srcDevice = mem.attributes(src).type == xdevMemoryTypeDevice;
  }
  mem.checkRange(dst, bytes, dstDevice, "dst");
  mem.checkRange(src, bytes, srcDevice, "src");
}

}  // namespace

extern "C" {

xdevError_t xdevMemGetInfo(size_t* freeBytes, size_t* totalBytes) {
  return api("xdevMemGetInfo", [&] {
    XDEV_REQUIRE(freeBytes != nullptr && totalBytes != nullptr, xdevErrorInvalidValue,
                 "NULL output");
    Runtime& rt = Runtime::get();
    size_t used = rt.memory().used(rt.currentDevice());
    *totalBytes = rt.memory().capacity();
    *freeBytes = *totalBytes - used;
    return xdevSuccess;
  });
}

xdevError_t xdevMalloc(void** ptr, size_t bytes) {
  return api("xdevMalloc", [&] {
    XDEV_REQUIRE(ptr != nullptr, xdevErrorInvalidValue, "ptr is NULL");
    *ptr = nullptr;
    Runtime& rt = Runtime::get();
    if (bytes > 0) *ptr = rt.memory().allocDevice(rt.currentDevice(), bytes);
    return xdevSuccess;
  });
}

xdevError_t xdevFree(void* ptr) {
  return api("xdevFree", [&] {
    if (ptr == nullptr) return xdevSuccess;
    Runtime& rt = Runtime::get();
    rt.memory().checkFreeable(ptr, xdevMemoryTypeDevice, xdevErrorInvalidDevicePointer);
    xdev::waitAll(rt.streams(-1), true);  // queued work may still use ptr
    rt.memory().free(ptr, xdevMemoryTypeDevice, xdevErrorInvalidDevicePointer);
    return xdevSuccess;
  });
}

xdevError_t xdevHostAlloc(void** ptr, size_t bytes) {
  return api("xdevHostAlloc", [&] {
    XDEV_REQUIRE(ptr != nullptr, xdevErrorInvalidValue, "ptr is NULL");
    *ptr = nullptr;
    Runtime& rt = Runtime::get();
    if (bytes > 0) *ptr = rt.memory().allocHost(rt.currentDevice(), bytes);
    return xdevSuccess;
  });
}

xdevError_t xdevFreeHost(void* ptr) {
  return api("xdevFreeHost", [&] {
    if (ptr == nullptr) return xdevSuccess;
    Runtime& rt = Runtime::get();
    rt.memory().checkFreeable(ptr, xdevMemoryTypeHost, xdevErrorInvalidValue);
    xdev::waitAll(rt.streams(-1), true);
    rt.memory().free(ptr, xdevMemoryTypeHost, xdevErrorInvalidValue);
    return xdevSuccess;
  });
}

xdevError_t xdevPointerGetAttributes(xdevPointerAttributes* attr, const void* ptr) {
  return api("xdevPointerGetAttributes", [&] {
    XDEV_REQUIRE(attr != nullptr, xdevErrorInvalidValue, "attr is NULL");
    *attr = Runtime::get().memory().attributes(ptr);
    return xdevSuccess;
  });
}

xdevError_t xdevMemcpyAsync(void* dst, const void* src, size_t bytes, xdevMemcpyKind kind,
                            xdevStream_t stream) {
  return api("xdevMemcpyAsync", [&] {
    Runtime& rt = Runtime::get();
    auto s = rt.stream(stream);
    checkCopy(rt.memory(), dst, src, bytes, kind);
    if (bytes > 0) s->enqueue([=] { std::memmove(dst, src, bytes); });
    return xdevSuccess;
  });
}

xdevError_t xdevMemcpy(void* dst, const void* src, size_t bytes, xdevMemcpyKind kind) {
  return api("xdevMemcpy", [&] {
    Runtime& rt = Runtime::get();
    auto s = rt.stream(nullptr);
    checkCopy(rt.memory(), dst, src, bytes, kind);
    if (bytes == 0) return xdevSuccess;
    if (xdev::Stream::current() != nullptr) {  // inside a host function: its stream is ordered
      std::memmove(dst, src, bytes);
      return xdevSuccess;
    }
    s->waitFor(s->enqueue([=] { std::memmove(dst, src, bytes); }));
    return s->error();
  });
}

xdevError_t xdevMemsetAsync(void* dst, int value, size_t bytes, xdevStream_t stream) {
  return api("xdevMemsetAsync", [&] {
    Runtime& rt = Runtime::get();
    auto s = rt.stream(stream);
    rt.memory().checkRange(dst, bytes, true, "dst");
    if (bytes > 0) s->enqueue([=] { std::memset(dst, value, bytes); });
    return xdevSuccess;
  });
}

}  // extern "C"
