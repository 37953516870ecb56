// C entry points: allocation, pointer attributes, copies and memset.
#include <cstring>

#include "runtime.h"
#include "status.h"

using xdev::api;
using xdev::Runtime;

namespace {

// Validates a copy's kind and both ranges (memory.h: device sides inside one allocation, host
// sides clear of device memory).
void checkCopy(xdev::Memory& mem, void* dst, const void* src, size_t bytes,
               const xdevMemcpyKind& callersKind) {
  const int kind = xdev::rawValue(callersKind);
  XDEV_REQUIRE(kind >= xdevMemcpyHostToHost && kind <= xdevMemcpyDefault, xdevErrorInvalidValue,
               "unknown copy kind ", kind);
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

// xdevMalloc and xdevHostAlloc: bytes == 0 gives NULL.
xdevError_t allocate(const char* fn, void** ptr, size_t bytes, xdevMemoryType type) {
  return api(fn, [&] {
    XDEV_REQUIRE(ptr != nullptr, xdevErrorInvalidValue, "ptr is NULL");
    *ptr = nullptr;
    Runtime& rt = Runtime::get();
    if (bytes == 0) return xdevSuccess;
    int device = rt.currentDevice();
    *ptr = type == xdevMemoryTypeDevice ? rt.memory().allocDevice(device, bytes)
                                        : rt.memory().allocHost(device, bytes);
    return xdevSuccess;
  });
}

// xdevFree and xdevFreeHost: NULL is a no-op; waits for the work queued on the owning
// device's streams first (it may use ptr), as cudaFree synchronises its device. Only that
// device's: several ranks of one process drive one device each, and a rank freeing its
// buffer must not wait for another rank's stream, which may hold a collective that needs
// this very rank to proceed.
xdevError_t release(const char* fn, void* ptr, xdevMemoryType type, xdevError_t notOurs) {
  return api(fn, [&] {
    if (ptr == nullptr) return xdevSuccess;
    Runtime& rt = Runtime::get();
    rt.memory().checkFreeable(ptr, type, notOurs);
    xdev::waitAll(rt.streams(rt.memory().attributes(ptr).device), true);
    rt.memory().free(ptr, type, notOurs);
    return xdevSuccess;
  });
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
  return allocate("xdevMalloc", ptr, bytes, xdevMemoryTypeDevice);
}

xdevError_t xdevFree(void* ptr) {
  return release("xdevFree", ptr, xdevMemoryTypeDevice, xdevErrorInvalidDevicePointer);
}

xdevError_t xdevHostAlloc(void** ptr, size_t bytes) {
  return allocate("xdevHostAlloc", ptr, bytes, xdevMemoryTypeHost);
}

xdevError_t xdevFreeHost(void* ptr) {
  return release("xdevFreeHost", ptr, xdevMemoryTypeHost, xdevErrorInvalidValue);
}

xdevError_t xdevPointerGetAttributes(xdevPointerAttributes* attr, const void* ptr) {
  return api("xdevPointerGetAttributes", [&] {
    XDEV_REQUIRE(attr != nullptr, xdevErrorInvalidValue, "attr is NULL");
    *attr = Runtime::get().memory().attributes(ptr);
    return xdevSuccess;
  });
}

// The activity record's name of a copy: which sides are device memory.
const char* copyName(xdev::Memory& m, const void* dst, const void* src) {
  const bool d = m.attributes(dst).type == xdevMemoryTypeDevice;
  const bool s = m.attributes(src).type == xdevMemoryTypeDevice;
  return s ? (d ? "Memcpy DtoD" : "Memcpy DtoH") : (d ? "Memcpy HtoD" : "Memcpy HtoH");
}

xdev::activity::Label copyLabel(xdev::Memory& m, const void* dst, const void* src, size_t bytes) {
  if (!xdev::activity::enabled()) return {};
  return {copyName(m, dst, src), xdevActivityMemcpy, bytes, 0};
}

xdevError_t xdevMemcpyAsync(void* dst, const void* src, size_t bytes, xdevMemcpyKind kind,
                            xdevStream_t stream) {
  return api("xdevMemcpyAsync", [&] {
    Runtime& rt = Runtime::get();
    auto s = rt.stream(stream);
    checkCopy(rt.memory(), dst, src, bytes, kind);
    if (bytes > 0) {
      s->enqueue([=] { std::memmove(dst, src, bytes); }, true,
                 copyLabel(rt.memory(), dst, src, bytes));
    }
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
    const uint64_t pos = s->enqueue([=] { std::memmove(dst, src, bytes); }, true,
                                    copyLabel(rt.memory(), dst, src, bytes));
    s->waitFor(pos);
    s->check(pos);
    return xdevSuccess;
  });
}

xdevError_t xdevMemsetAsync(void* dst, int value, size_t bytes, xdevStream_t stream) {
  return api("xdevMemsetAsync", [&] {
    Runtime& rt = Runtime::get();
    auto s = rt.stream(stream);
    rt.memory().checkRange(dst, bytes, true, "dst");
    if (bytes > 0) {
      s->enqueue([=] { std::memset(dst, value, bytes); }, true,
                 {"Memset", xdevActivityMemset, bytes, 0});
    }
    return xdevSuccess;
  });
}

}  // extern "C"
