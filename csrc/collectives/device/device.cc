// The dtype/op support matrix and the Device defaults (selection: registry.cc).
#include "device.h"

#include <algorithm>

#include "common/clock.h"
#include "common/error.h"
#include "common/sum64.h"
#include "dtype.h"

namespace xccl {

size_t dtypeSize(xcclDataType_t dtype) {
  switch (dtype) {
    case xcclInt8:
    case xcclUint8:
    case xcclBool:
    case xcclFloat8e4m3:
    case xcclFloat8e5m2:
      return 1;
    case xcclFloat16:
    case xcclBfloat16:
    case xcclUint16:
      return 2;
    case xcclInt32:
    case xcclFloat32:
    case xcclUint32:
      return 4;
    case xcclInt64:
    case xcclFloat64:
    case xcclUint64:
      return 8;
    default:
      return 0;
  }
}

bool opSupported(xcclDataType_t dtype, xcclRedOp_t op) {
  if (dtypeSize(dtype) == 0 || op < 0 || op >= xcclNumOps) return false;
  switch (op) {
    case xcclSum:
    case xcclProd:
    case xcclMax:
    case xcclMin:
      return true;
    case xcclAvg:
    case xcclPremulSum:
      return dtype != xcclBool;
    case xcclBand:
    case xcclBor:
    case xcclBxor:
      return !isFloatType(dtype);
    default:
      return false;
  }
}

void Device::copyHashed(void* dst, const void* src, size_t bytes, CopyKind kind, uint64_t at,
                        uint64_t* hash) {
  copy(dst, src, bytes, kind);
  *hash = sum64Extend(*hash, at, dst, bytes);
}

void Device::reduceHashed(void* dst, const void* a, const void* b, size_t count,
                          xcclDataType_t dtype, xcclRedOp_t op, uint64_t at, uint64_t* hash) {
  *hash = sum64Extend(*hash, at, b, count * dtypeSize(dtype));  // before the reduction reads b
  reduce(dst, a, b, count, dtype, op);
}

void* Device::openShared(const std::string&, int, size_t) {
  throw InvalidUsage(strCat("device ", name(), " cannot map a peer's shared memory"));
}

void Device::reduceCopy(void* const* dsts, int ndst, const void* const* srcs, int nsrc,
                        size_t count, xcclDataType_t dtype, xcclRedOp_t op) {
  XCCL_CHECK(ndst >= 1 && nsrc >= 1, "reduceCopy: ", nsrc, " sources into ", ndst, " destinations");
  const size_t es = dtypeSize(dtype);
  if (es == 0)
    throw InvalidArgument(strCat("reduceCopy: unknown data type ", static_cast<int>(dtype)));
  const size_t per = std::max<size_t>(1, (size_t{256} << 10) / es);
  const size_t block = std::min(per, count);
  if (block == 0) return;
  void* tmp = alloc(block * es);
  try {
    for (size_t o = 0; o < count; o += per) {
      const size_t c = std::min(per, count - o), at = o * es;
      auto src = [&](int k) { return static_cast<const char*>(srcs[k]) + at; };
      if (nsrc == 1) {
        copy(tmp, src(0), c * es, CopyKind::kDeviceToDevice);
      } else {
        reduce(tmp, src(0), src(1), c, dtype, op);
      }
      for (int k = 2; k < nsrc; ++k) reduce(tmp, tmp, src(k), c, dtype, op);
      for (int k = 0; k < ndst; ++k) {
        copy(static_cast<char*>(dsts[k]) + at, tmp, c * es, CopyKind::kDeviceToDevice);
      }
    }
  } catch (...) {
    free(tmp);
    throw;
  }
  free(tmp);
}

void Device::closeShared(void*, size_t, bool) {}

const void* Device::importBuffer(const PeerRef&, int, size_t) {
  throw RemoteError(
      strCat("a peer sent a peer-read frame, but device ", name(), " cannot map a peer's buffers"));
}

void Device::waitStaged(const uint32_t* ready, const std::atomic<bool>& abort) {
  Backoff backoff;
  while (__atomic_load_n(ready, __ATOMIC_ACQUIRE) == 0) {
    if (abort.load(std::memory_order_relaxed)) {
      throw InvalidUsage(
          "communicator aborted while the operation waited for the work queued before it on "
          "its stream");
    }
    backoff.idle();
  }
}

}  // namespace xccl
