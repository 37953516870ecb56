// Simulated device memory: host memory accounted per device against a capacity, device
// allocations carved from shareable memfd segments (arena.h: other processes may map them,
// as CUDA IPC), pinned-host ones plain aligned allocations; and a process-wide registry of
// every allocation so that any pointer into one (interior pointers too) can be attributed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "arena.h"
#include "status.h"
#include "xdev_runtime.h"

namespace xdev {

class Memory {
 public:
  static constexpr size_t kAlignment = 256;

  Memory(int devices, size_t capacityPerDevice, size_t segmentBytes)
      : capacity_(capacityPerDevice), used_(devices, 0), arena_(segmentBytes) {}

  size_t capacity() const { return capacity_; }
  size_t used(int device);

  // Throws Failure(xdevErrorMemoryAllocation) beyond the device's capacity.
  void* allocDevice(int device, size_t bytes);
  void* allocHost(int device, size_t bytes);
  // Removes the allocation starting at ptr from the registry and frees it. Throws
  // Failure(code) when ptr is not the start of an allocation of that type.
  void free(void* ptr, xdevMemoryType type, xdevError_t code);
  // Throws like free() would, without freeing (to fail before waiting for streams).
  void checkFreeable(const void* ptr, xdevMemoryType type, xdevError_t code);

  xdevPointerAttributes attributes(const void* ptr);
  // Inter-process access (xdevIpc*): where the device byte at ptr lives, and the bytes of
  // its allocation from ptr on; throws Failure(xdevErrorInvalidDevicePointer) for a pointer
  // that is not device memory. open(): a peer's byte, mapped in this process.
  ArenaRef share(const void* ptr, size_t* bytesLeft);
  // A peer's segment, once mapped here, is registered as device memory of `device` (the
  // opener's current device, as CUDA's peer access makes it addressable from there): copies
  // and kernels take it as device memory, xdevFree and xdevIpcGetMemHandle refuse it.
  void* openPeer(int device, int ownerPid, const ArenaRef& ref);
  void* ownByte(const ArenaRef& ref) {
    void* p = arena_.byteOf(ref);
    XDEV_REQUIRE(p != nullptr, xdevErrorInvalidValue,
                 "IPC memory handle of this process names no memory segment of it");
    return p;
  }
  // Throws Failure(xdevErrorInvalidValue) unless [ptr, ptr+bytes) lies in one device
  // allocation (mustBeDevice) or overlaps none (!mustBeDevice). `what` names the operand.
  void checkRange(const void* ptr, size_t bytes, bool mustBeDevice, const char* what);

 private:
  struct Block {
    size_t size;     // bytes requested
    size_t charged;  // bytes counted against the device (rounded up to kAlignment)
    int device;
    xdevMemoryType type;
    bool peer = false;  // a peer's segment mapped here (openPeer), not ours to free or share
  };
  void* allocate(int device, size_t bytes, xdevMemoryType type);
  // The block containing ptr, or end(). Caller holds mu_.
  std::map<uintptr_t, Block>::iterator find(uintptr_t p);

  const size_t capacity_;
  std::mutex mu_;
  std::vector<size_t> used_;
  std::map<uintptr_t, Block> blocks_;  // by base address
  Arena arena_;
  PeerSegments peers_;
};

}  // namespace xdev
