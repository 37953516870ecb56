// A buffer of one rank of xccl-tests on the run's device (-D), with guard regions of a
// known pattern on both sides of the region a case uses.
//
// A rank keeps its buffers for the whole run and re-guards them per case (prepare), as
// nccl-tests allocates once: freeing device memory synchronises the device, and with several
// ranks sharing a device a free between cases could wait for a peer's stream that holds a
// collective needing this rank. Filling and checking work on host(): the memory itself where
// the host can address it (host, xdev), else a host mirror that upload() copies to the device
// before an operation and download() copies back after (cuda); every read of a result comes
// after the rank's stream is synchronised.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device_api.h"

namespace xt {

class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 256;  // guard bytes on each side

  GuardedBuffer(size_t capacity, DeviceApi& api);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  size_t capacity() const { return capacity_; }
  // The next case uses `bytes` bytes: the trailing guard goes right after them.
  void prepare(size_t bytes);
  unsigned char* host() { return base_ + kGuard; }   // fill and check here
  unsigned char* device() { return dev_ + kGuard; }  // give the library this
  // The whole allocation on the device, guards included (what --mem-alloc registers).
  void* block() { return dev_; }
  size_t blockBytes() const { return capacity_ + 2 * kGuard; }
  void upload();    // host mirror -> device (nothing where the host addresses the device)
  void download();  // device -> host mirror
  // Guard bytes that no longer hold their pattern ("out of bounds values").
  int64_t damage() const;

 private:
  static unsigned char pattern(size_t i) { return static_cast<unsigned char>(0xA5 ^ (i * 0x3B)); }
  unsigned char* base_ = nullptr;
  unsigned char* dev_ = nullptr;
  size_t capacity_;
  size_t bytes_ = 0;
  DeviceApi& api_;
};

}  // namespace xt
