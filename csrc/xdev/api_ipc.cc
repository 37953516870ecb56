// C entry points: inter-process access to device memory (xdevIpc*, arena.h).
//
// Handle layout (64 bytes, native byte order: both ends are on one host):
//   "XDIPC1\0\0" | owner pid | segment id | segment fd | segment bytes | offset of the byte |
//   bytes of the allocation from it on | 0
#include <unistd.h>

#include <cstring>

#include "runtime.h"
#include "status.h"

using xdev::api;
using xdev::Runtime;

namespace {

constexpr char kMagic[8] = {'X', 'D', 'I', 'P', 'C', '1', 0, 0};

struct Wire {
  char magic[8];
  int64_t pid;
  uint64_t segmentId;
  int64_t fd;
  uint64_t segmentBytes;
  uint64_t offset;
  uint64_t bytesLeft;
  uint64_t zero;
};
static_assert(sizeof(Wire) == XDEV_IPC_HANDLE_SIZE, "the handle is its wire format");

Wire parse(const xdevIpcMemHandle_t& handle) {
  Wire w;
  std::memcpy(&w, handle.reserved, sizeof(w));
  XDEV_REQUIRE(std::memcmp(w.magic, kMagic, sizeof(kMagic)) == 0 && w.pid > 0 && w.zero == 0 &&
                   w.offset < w.segmentBytes && w.bytesLeft <= w.segmentBytes - w.offset,
               xdevErrorInvalidValue, "not an xdev IPC memory handle (or a corrupt one)");
  return w;
}

}  // namespace

extern "C" {

xdevError_t xdevIpcGetMemHandle(xdevIpcMemHandle_t* handle, void* devPtr) {
  return api("xdevIpcGetMemHandle", [&] {
    XDEV_REQUIRE(handle != nullptr && devPtr != nullptr, xdevErrorInvalidValue, "NULL argument");
    size_t left = 0;
    xdev::ArenaRef ref = Runtime::get().memory().share(devPtr, &left);
    Wire w{};
    std::memcpy(w.magic, kMagic, sizeof(kMagic));
    w.pid = getpid();
    w.segmentId = ref.segmentId;
    w.fd = ref.fd;
    w.segmentBytes = ref.segmentBytes;
    w.offset = ref.offset;
    w.bytesLeft = left;
    std::memcpy(handle->reserved, &w, sizeof(w));
    return xdevSuccess;
  });
}

xdevError_t xdevIpcOpenMemHandle(void** devPtr, xdevIpcMemHandle_t handle, unsigned int flags) {
  return api("xdevIpcOpenMemHandle", [&] {
    XDEV_REQUIRE(devPtr != nullptr, xdevErrorInvalidValue, "devPtr is NULL");
    XDEV_REQUIRE(flags == 0, xdevErrorInvalidValue, "unknown flags ", flags);
    *devPtr = nullptr;
    const Wire w = parse(handle);
    xdev::ArenaRef ref{w.segmentId, w.fd, w.segmentBytes, w.offset};
    Runtime& rt = Runtime::get();
    if (w.pid == getpid()) {
      // This process's own memory: the byte where it is (mapping it again would alias it).
      *devPtr = rt.memory().ownByte(ref);
      return xdevSuccess;
    }
    *devPtr = rt.memory().openPeer(rt.currentDevice(), static_cast<int>(w.pid), ref);
    return xdevSuccess;
  });
}

xdevError_t xdevIpcMemHandleGetSize(const xdevIpcMemHandle_t* handle, size_t* bytes) {
  return api("xdevIpcMemHandleGetSize", [&] {
    XDEV_REQUIRE(handle != nullptr && bytes != nullptr, xdevErrorInvalidValue, "NULL argument");
    *bytes = parse(*handle).bytesLeft;
    return xdevSuccess;
  });
}

xdevError_t xdevIpcCloseMemHandle(void* devPtr) {
  return api("xdevIpcCloseMemHandle", [&] {
    XDEV_REQUIRE(devPtr != nullptr, xdevErrorInvalidValue, "devPtr is NULL");
    return xdevSuccess;
  });
}

}  // extern "C"
