// The host-memory simulated accelerator: "device memory" is ordinary RAM, copies are
// memcpy, kernels are loops the compiler vectorises. It runs everywhere and is the
// reference the other devices are checked against.
#pragma once

#include <map>
#include <mutex>

#include "collectives/device/device.h"
#include "common/shared_memory.h"

namespace xccl {

class HostDevice : public Device {
 public:
  explicit HostDevice(int ordinal) : ordinal_(ordinal) {}
  const char* name() const override { return "host"; }
  bool hostAddressable() const override { return true; }
  int ordinal() const override { return ordinal_; }
  std::string busId() const override;

  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void registerStaging(void*, size_t) override {}
  void unregisterStaging(void*) override {}

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind) override;
  void copyHashed(void* dst, const void* src, size_t bytes, CopyKind kind, uint64_t at,
                  uint64_t* hash) override;
  void reduceHashed(void* dst, const void* a, const void* b, size_t count, xcclDataType_t dtype,
                    xcclRedOp_t op, uint64_t at, uint64_t* hash) override;
  void reduceCopy(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                  xcclDataType_t dtype, xcclRedOp_t op) override;
  void reduce(void* dst, const void* a, const void* b, size_t count, xcclDataType_t dtype,
              xcclRedOp_t op) override;
  void scale(void* dst, const void* src, size_t count, xcclDataType_t dtype,
             const void* scalar) override;
  void divide(void* dst, size_t count, xcclDataType_t dtype, int64_t divisor) override;

  // Shareable memory is a memfd mapping; the handle is its fd number.
  void* allocShared(size_t bytes, std::string* handle) override;
  void* openShared(const std::string& handle, int ownerPid, size_t bytes) override;
  void closeShared(void* ptr, size_t bytes, bool owner) override;

  // xcclMemAlloc memory (host_peer_memory.cc): one memfd per allocation, a header page
  // (magic, a random nonce, the size) ahead of the caller's bytes; exported as the memfd's
  // number, offset and nonce, imported by mapping the whole memfd once (kept until the owner
  // frees it: the same fd number with another nonce replaces the mapping). One registry per
  // process, whatever the host ordinal of the communicator that reads it.
  void* allocPeerable(size_t bytes) override;
  void freePeerable(void* ptr) override;
  bool exportBuffer(const void* ptr, size_t bytes, PeerRef* ref) override;
  const void* importBuffer(const PeerRef& ref, int ownerPid, size_t bytes) override;
  // Host memory copies fast: measured on 2 ranks (bench_core --mem-alloc against
  // XCCL_PEER_READ=0), the rings win up to 256 KiB messages (20 against 28 us), peer reads
  // from 512 KiB (57 against 75-112 us for a 1 MiB allreduce).
  size_t peerReadMinBytes() const override { return 512 << 10; }

  // The host device has no streams: a stream argument is a caller's mistake.
  void* streamCapture(xcclStream_t stream) override;
  void streamWait(void*, const std::atomic<bool>&) override {}
  void streamRelease(void*) override {}

 private:
  int ordinal_;
  std::mutex sharedMu_;
  std::map<void*, SharedMapping> shared_;  // allocShared / openShared mappings by address
};

}  // namespace xccl
