// Device and pinned-host allocations, the registry behind xdevPointerGetAttributes, and the
// per-device usage counters behind xdevMemGetInfo.
#include "memory.h"

#include <cstdlib>

#include "status.h"

namespace xdev {

size_t Memory::used(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  return used_.at(device);
}

void* Memory::allocDevice(int device, size_t bytes) {
  return allocate(device, bytes, xdevMemoryTypeDevice);
}

void* Memory::allocHost(int device, size_t bytes) {
  return allocate(device, bytes, xdevMemoryTypeHost);
}

void* Memory::allocate(int device, size_t bytes, xdevMemoryType type) {
  XDEV_REQUIRE(bytes <= SIZE_MAX - kAlignment, xdevErrorMemoryAllocation, "cannot allocate ", bytes,
               " bytes");
  size_t charged = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  const bool onDevice = type == xdevMemoryTypeDevice;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (onDevice) {
      XDEV_REQUIRE(charged <= capacity_ - used_[device], xdevErrorMemoryAllocation, "device ",
                   device, " out of memory: tried to allocate ", bytes, " bytes with ",
                   capacity_ - used_[device], " of ", capacity_, " free (XCCL_XDEV_MEMORY)");
      used_[device] += charged;  // reserved now, so concurrent callers cannot overshoot
    }
  }
  void* p = nullptr;
  if (onDevice) {
    try {
      p = arena_.alloc(charged);
    } catch (const std::bad_alloc&) {
    }
  } else {
    p = std::aligned_alloc(kAlignment, charged);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (p == nullptr) {
    if (onDevice) used_[device] -= charged;
    throw Failure(xdevErrorMemoryAllocation,
                  strCat("the host could not provide ", bytes, " bytes for device ", device));
  }
  blocks_[reinterpret_cast<uintptr_t>(p)] = Block{bytes, charged, device, type};
  return p;
}

std::map<uintptr_t, Memory::Block>::iterator Memory::find(uintptr_t p) {
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return blocks_.end();
  --it;
  // A zero-size block still owns its first byte (its address is unique).
  size_t extent = it->second.size == 0 ? 1 : it->second.size;
  return p - it->first < extent ? it : blocks_.end();
}

void Memory::checkFreeable(const void* ptr, xdevMemoryType type, xdevError_t code) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  XDEV_REQUIRE(it != blocks_.end() && it->second.type == type, code, "pointer ", ptr,
               " is not the start of a live ",
               type == xdevMemoryTypeDevice ? "xdevMalloc" : "xdevHostAlloc", " allocation");
}

void Memory::free(void* ptr, xdevMemoryType type, xdevError_t code) {
  size_t charged = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    XDEV_REQUIRE(it != blocks_.end() && it->second.type == type && !it->second.peer, code,
                 "pointer ", ptr,
                 " is not the start of a live allocation of that kind (freed "
                 "twice, or a peer's memory?)");
    charged = it->second.charged;
    if (type == xdevMemoryTypeDevice) used_[it->second.device] -= charged;
    blocks_.erase(it);
  }
  if (type == xdevMemoryTypeDevice) {
    arena_.release(ptr, charged);
  } else {
    std::free(ptr);
  }
}

ArenaRef Memory::share(const void* ptr, size_t* bytesLeft) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = find(p);
    XDEV_REQUIRE(it != blocks_.end() && it->second.type == xdevMemoryTypeDevice,
                 xdevErrorInvalidDevicePointer, "pointer ", ptr, " is not device memory");
    XDEV_REQUIRE(!it->second.peer, xdevErrorInvalidDevicePointer, "pointer ", ptr,
                 " is another process's device memory mapped here; only its owner shares it");
    *bytesLeft = it->second.size - (p - it->first);
  }
  ArenaRef ref;
  XDEV_REQUIRE(arena_.locate(ptr, &ref), xdevErrorInternal, "device pointer ", ptr,
               " is outside every memory segment");
  return ref;
}

void* Memory::openPeer(int device, int ownerPid, const ArenaRef& ref) {
  std::pair<void*, size_t> fresh{nullptr, 0};
  std::lock_guard<std::mutex> lock(mu_);  // registered before any opener sees the pointer
  void* p = peers_.open(ownerPid, ref, &fresh);
  if (fresh.first != nullptr) {
    blocks_[reinterpret_cast<uintptr_t>(fresh.first)] =
        Block{fresh.second, 0, device, xdevMemoryTypeDevice, true};
  }
  return p;
}

xdevPointerAttributes Memory::attributes(const void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end()) return {xdevMemoryTypeUnregistered, -1, nullptr, 0};
  return {it->second.type, it->second.device, reinterpret_cast<void*>(it->first), it->second.size};
}

void Memory::checkRange(const void* ptr, size_t bytes, bool mustBeDevice, const char* what) {
  if (bytes == 0) return;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  if (mustBeDevice) {
    auto it = find(p);
    XDEV_REQUIRE(it != blocks_.end() && it->second.type == xdevMemoryTypeDevice,
                 xdevErrorInvalidValue, what, " ", ptr, " is not device memory");
    XDEV_REQUIRE(bytes <= it->second.size - (p - it->first), xdevErrorInvalidValue, what, " ", ptr,
                 " + ", bytes, " bytes runs past the end of its ", it->second.size,
                 "-byte allocation");
    return;
  }
  // Host side: no device block may start inside [p, p+bytes) or contain p.
  auto it = find(p);
  bool overlaps = it != blocks_.end() && it->second.type == xdevMemoryTypeDevice;
  for (auto j = blocks_.lower_bound(p); !overlaps && j != blocks_.end() && j->first - p < bytes;
       ++j) {
    overlaps = j->second.type == xdevMemoryTypeDevice;
  }
  XDEV_REQUIRE(!overlaps, xdevErrorInvalidValue, what, " ", ptr, " (", bytes,
               " bytes) is device memory; use a device copy kind");
}

}  // namespace xdev
