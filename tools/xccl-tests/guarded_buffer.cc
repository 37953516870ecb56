// GuardedBuffer (guarded_buffer.h).
#include "guarded_buffer.h"

#include <cstdlib>
#include <new>

namespace xt {

GuardedBuffer::GuardedBuffer(size_t capacity, DeviceApi& api) : capacity_(capacity), api_(api) {
  dev_ = static_cast<unsigned char*>(api_.alloc(capacity + 2 * kGuard));
  if (api_.hostAddressable()) {
    base_ = dev_;
  } else {
    void* p = nullptr;
    if (posix_memalign(&p, 64, capacity + 2 * kGuard) != 0) throw std::bad_alloc();
    base_ = static_cast<unsigned char*>(p);
  }
  for (size_t i = 0; i < kGuard; ++i) base_[i] = pattern(i);
}

GuardedBuffer::~GuardedBuffer() {
  if (base_ != dev_) std::free(base_);
  api_.free(dev_);
}

void GuardedBuffer::prepare(size_t bytes) {
  bytes_ = bytes;
  for (size_t i = 0; i < kGuard; ++i) base_[kGuard + bytes_ + i] = pattern(kGuard + i);
}

void GuardedBuffer::upload() {
  if (base_ != dev_) api_.copyIn(dev_, base_, bytes_ + 2 * kGuard);
}

void GuardedBuffer::download() {
  if (base_ != dev_) api_.copyOut(base_, dev_, bytes_ + 2 * kGuard);
}

int64_t GuardedBuffer::damage() const {
  int64_t bad = 0;
  for (size_t i = 0; i < kGuard; ++i) {
    bad += base_[i] != pattern(i);
    bad += base_[kGuard + bytes_ + i] != pattern(kGuard + i);
  }
  return bad;
}

}  // namespace xt
