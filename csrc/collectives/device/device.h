// The device seam. Everything the core does to user buffers goes through a Device:
// copies between device memory and the transports' host staging memory, and the
// reduction kernels. A vendor ports XCCL by adding csrc/collectives/device/<vendor>/ with one
// Device subclass and one row in the table of kinds (registry.cc); nothing above this layer
// changes.
//
// Memory words used here:
//   device memory  - where user tensors live (for the host device, ordinary RAM);
//   staging memory - host memory owned by a transport (shared-memory rings, socket
//                    buffers), registered with registerStaging() so the device's
//                    kernels and copy engines can reach it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xccl.h"

namespace xccl {

enum class CopyKind {
  kDeviceToDevice,
  kDeviceToStaging,
  kStagingToDevice,
  // Like kStagingToDevice, for a destination that will not be read again soon (the final
  // copy of a large operation): the device may bypass its caches (streaming stores), which
  // saves the read-for-ownership of every written line.
  kStagingToDeviceNoReuse,
};

// Device memory named so that another process of this host can map it: what a peer-read
// frame carries (algorithms/frame.h). 64 bytes, opaque to the core, built and checked by
// the device (xdev: an xdevIpcMemHandle_t).
struct PeerRef {
  unsigned char bytes[64];
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;  // "host", "cuda"
  virtual int ordinal() const = 0;
  // A stable identifier of the physical device (PCI bus id, or "host:<n>"); used in logs
  // and by topology to tell devices apart.
  virtual std::string busId() const = 0;

  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  // Makes host staging memory reachable by the device (pinning / mapping). Idempotent per range.
  virtual void registerStaging(void* ptr, size_t bytes) = 0;
  virtual void unregisterStaging(void* ptr) = 0;

  // Synchronous copy of `bytes` bytes.
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind) = 0;
  // copy() that also adds the bytes' terms to *hash (common/sum64.h; `at` is their offset in
  // the message), for XCCL_CHECKSUM=1. By default the copy, then a pass over the destination,
  // which the host must be able to read; the host device (and xdev, whose memory is host
  // memory) does both in one pass.
  virtual void copyHashed(void* dst, const void* src, size_t bytes, CopyKind kind, uint64_t at,
                          uint64_t* hash);
  // reduce() that also adds b's terms to *hash (`at`: b's offset in its message), for
  // XCCL_CHECKSUM=1. By default a pass over b, then the reduction; the host device folds the
  // hash into the reduction's own pass for float32 sums.
  virtual void reduceHashed(void* dst, const void* a, const void* b, size_t count,
                            xcclDataType_t dtype, xcclRedOp_t op, uint64_t at, uint64_t* hash);
  // dst[i] = a[i] (op) b[i] for i < count. dst and a are device memory (dst may equal a, or
  // b: the kernels are element-wise); b is device memory or registered staging memory. Avg and
  // PremulSum are not reductions at this level (callers use kSum plus scale()); bitwise ops only
  // for integer types.
  virtual void reduce(void* dst, const void* a, const void* b, size_t count, xcclDataType_t dtype,
                      xcclRedOp_t op) = 0;
  // dsts[k][i] = ((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ... for every k < ndst (nsrc >= 1,
  // ndst >= 1): reduce()'s fold, stored to several places ("mapped", algorithms/slot.cc). A
  // destination may be a source. By default reduce() and copy() through a temporary of this
  // device, 256 KiB at a time; the host device (and xdev) does it in one pass, each block of
  // the result stored everywhere while its sources are in the cache.
  virtual void reduceCopy(void* const* dsts, int ndst, const void* const* srcs, int nsrc,
                          size_t count, xcclDataType_t dtype, xcclRedOp_t op);
  // dst[i] = src[i] * scalar, scalar a host value of `dtype` (dst may equal src).
  virtual void scale(void* dst, const void* src, size_t count, xcclDataType_t dtype,
                     const void* scalar) = 0;
  // dst[i] /= divisor (integer division for integer types). Used by Avg.
  virtual void divide(void* dst, size_t count, xcclDataType_t dtype, int64_t divisor) = 0;

  // Ordering with the caller's stream (the CUDA/NCCL model: a collective is a piece of
  // work on the stream). streamCapture() runs on the enqueuing thread and returns a token
  // for "all work on stream so far"; streamWait() runs on the progress thread and blocks
  // until that work is done (so the inputs are ready). streamRelease() frees the token.
  // streamHold() makes work enqueued on the stream afterwards wait until streamResume(token)
  // (called exactly once, by the progress thread, when the collective is done or failed):
  // the stream-side end of the operation.
  // The host device has no asynchronous streams: tokens are null and nothing is held.
  // streamOrdered(): the device orders work on streams (every stream argument is one).
  virtual bool streamOrdered() const { return false; }
  virtual void* streamCapture(xcclStream_t stream) = 0;
  // `abort`: the communicator's flag. A staged operation's wait (below) polls host memory
  // and ends with an error once it is set (xcclCommAbort while the stream is stuck before the
  // operation); the runtime's own blocking waits (an event) end only with the stream.
  virtual void streamWait(void* token, const std::atomic<bool>& abort) = 0;
  virtual void streamRelease(void* token) = 0;
  // `label` names the held span where the device records activity (xdev: "xccl allreduce").
  virtual void* streamHold(xcclStream_t /*stream*/, const char* /*label*/) { return nullptr; }
  virtual void streamResume(void* /*token*/) {}
  // Instead of streamResume, for an operation that failed (or was dropped after a failure):
  // nothing queued on the stream after it may observe its outputs as a result. xdev fails
  // the stream there (sticky, with `why`); CUDA, which cannot fail a stream from the host,
  // faults the context with a trap kernel behind the hold unless XCCL_CUDA_FAILED_HOLD says
  // otherwise (docs/CUDA.md). The default resumes: devices without streams hold nothing.
  virtual void streamFail(void* token, const std::string& /*why*/) { streamResume(token); }

  // Staging through host memory (the CUDA device by default, XCCL_CUDA_STAGING): the engine
  // runs an operation on pinned host copies of its buffers, with the host device's copies and
  // reductions, so that the progress thread makes no call into the device runtime while the
  // caller's stream is held: a module load waiting for that stream would block such a call,
  // and the stream would wait for the collective forever (docs/CUDA.md). On the enqueuing
  // thread, before streamCapture: stageBegin() returns `bytes` of host memory that stays the
  // operation's until the stream has passed it; stageIn() queues copies into it on the stream
  // (the collective's inputs); stageOut() names the copies back, which the next streamHold()
  // of this thread queues right after its hold. streamCapture() then marks the point the
  // staged inputs are complete, and streamWait() waits for it without a runtime call.
  struct StageCopy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  virtual bool stagesThroughHost() const { return false; }
  // streamWait of a staged operation, for the devices that stage: polls `*ready` (a word of
  // host memory the stream sets to 1 once the inputs are in; no runtime call) until it is
  // set, or throws InvalidUsage once `abort` is.
  static void waitStaged(const uint32_t* ready, const std::atomic<bool>& abort);
  // `engine`: the device the engine runs the operation on (the host device), whose
  // allocPeerable() memory the stage comes from, so that peers of this host read it in place
  // (single-copy peer reads) as they read xcclMemAlloc memory.
  virtual char* stageBegin(xcclStream_t /*stream*/, size_t /*bytes*/, Device& /*engine*/) {
    return nullptr;
  }
  virtual void stageIn(xcclStream_t /*stream*/, const std::vector<StageCopy>& /*copies*/) {}
  virtual void stageOut(std::vector<StageCopy>&& /*copies*/) {}

  // Device memory another process of this host can map (CUDA IPC; for the host device a
  // memfd): what the shared-memory transport puts its payload rings in, so that data moves
  // device to device without a stop in host memory. allocShared() returns nullptr when the
  // device cannot share memory; otherwise the memory and, in *handle, the text a peer passes
  // to openShared() (with this process's pid). closeShared() releases either kind.
  // prefersSharedRings(): payload rings in shared device memory beat host staging rings
  // (devices whose memory the host cannot address at full speed).
  virtual bool prefersSharedRings() const { return false; }
  virtual void* allocShared(size_t /*bytes*/, std::string* /*handle*/) { return nullptr; }
  virtual void* openShared(const std::string& handle, int ownerPid, size_t bytes);
  virtual void closeShared(void* ptr, size_t bytes, bool owner);

  // Single-copy transfers between processes of a host (peer reads,
  // algorithms/exchange_progress.cc): exportBuffer() names [ptr, ptr + bytes) of device memory for
  // a peer, or returns false when the device cannot share that memory (then the bytes travel
  // through the transport). importBuffer() returns the address, here, of the first byte of a buffer
  // that process ownerPid exported with at least `bytes` bytes; it maps the owner's memory the
  // first time (later calls are a lookup) and throws RemoteError for a reference it cannot honour.
  virtual bool exportBuffer(const void* /*ptr*/, size_t /*bytes*/, PeerRef* /*ref*/) {
    return false;
  }
  virtual const void* importBuffer(const PeerRef& ref, int ownerPid, size_t bytes);
  // The smallest message worth a peer read on this device (XCCL_PEER_READ_MIN=0, the default):
  // below it the rings' pipelined two copies are faster than one unpipelined read.
  virtual size_t peerReadMinBytes() const { return 64 << 10; }
  // Whether this device's kernels take `dtype` (the validator refuses the others).
  virtual bool supportsType(xcclDataType_t /*dtype*/) const { return true; }
  // xcclMemAlloc / xcclMemFree: memory of this device that the processes of this host can
  // map, so exportBuffer() succeeds for any range inside it. By default alloc() and free():
  // devices whose every allocation is shareable (xdev). The host device makes it a memfd.
  virtual void* allocPeerable(size_t bytes) { return alloc(bytes); }
  virtual void freePeerable(void* ptr) { free(ptr); }
  // Whether host code may load and store this device's memory directly (the host device, and
  // xdev, whose memory is host memory): what windows need, whose signals are atomic adds
  // that the caller's thread (or the progress thread) makes in a peer's mapped memory.
  virtual bool hostAddressable() const { return false; }
};

// A device by kind ("host", "xdev"; "" = XCCL_DEVICE, default host) and ordinal (< 0: the
// kind's current/default ordinal). One instance per (kind, ordinal) per process. Throws
// InvalidUsage for a kind this build lacks or an ordinal the kind does not have.
Device& getDevice(const std::string& kind, int ordinal);
Device& getDevice(int ordinal);  // getDevice("", ordinal)
// The kinds this build has, e.g. "host, xdev, cuda".
const char* availableDeviceKinds();
// The kind an xcclConfig_t deviceType selects ("" for xcclDeviceDefault: XCCL_DEVICE decides).
// Throws Error(kInvalidArgument) for a value that is no xcclDeviceType_t.
const char* deviceKind(xcclDeviceType_t type);

// How this host's devices of a kind are wired, for topology detection: how many there are,
// each one's NUMA node, and for every pair the kind of the link ("XL" direct device link,
// "PIX", "PXB", "PHB", "NODE", "SYS": the words of collectives/topology/system.h) and its
// GB/s (0: not known). The host kind has no devices (count 0). xdev's wiring is simulated
// (xdev_device.cc); CUDA's is read from the runtime and the PCI tree in sysfs.
struct DeviceWiring {
  int count = 0;
  std::vector<int> numa;
  std::vector<std::vector<std::string>> kind;
  std::vector<std::vector<double>> gbs;
  void resize(int n) {
    count = n;
    numa.assign(n, 0);
    kind.assign(n, std::vector<std::string>(n, ""));
    gbs.assign(n, std::vector<double>(n, 0));
  }
};
DeviceWiring deviceWiring(const std::string& kind);

// True for the reduction ops defined on dtype (e.g. no bitwise ops on floats).
bool opSupported(xcclDataType_t dtype, xcclRedOp_t op);
size_t dtypeSize(xcclDataType_t dtype);

}  // namespace xccl
