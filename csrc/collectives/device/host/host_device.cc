#include "host_device.h"

#include <cstdlib>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/error.h"
#include "common/sum64.h"
#include "xdev_runtime.h"

namespace xccl {

// The runtime's kernel enums are xccl's, value for value.
constexpr bool same(int xdevValue, int xcclValue) { return xdevValue == xcclValue; }
static_assert(same(xdevInt8, xcclInt8) && same(xdevUint8, xcclUint8) &&
              same(xdevInt32, xcclInt32) && same(xdevInt64, xcclInt64) &&
              same(xdevFloat16, xcclFloat16) && same(xdevFloat32, xcclFloat32) &&
              same(xdevFloat64, xcclFloat64) && same(xdevBfloat16, xcclBfloat16) &&
              same(xdevBool, xcclBool) && same(xdevFloat8e4m3, xcclFloat8e4m3) &&
              same(xdevFloat8e5m2, xcclFloat8e5m2) && same(xdevUint16, xcclUint16) &&
              same(xdevUint32, xcclUint32) && same(xdevUint64, xcclUint64) &&
              same(xdevNumTypes, xcclNumTypes));
static_assert(same(xdevSum, xcclSum) && same(xdevProd, xcclProd) && same(xdevMax, xcclMax) &&
              same(xdevMin, xcclMin) && same(xdevAvg, xcclAvg) &&
              same(xdevPremulSum, xcclPremulSum) && same(xdevBand, xcclBand) &&
              same(xdevBor, xcclBor) && same(xdevBxor, xcclBxor) && same(xdevNumOps, xcclNumOps));

namespace {

// A kernel call the checks above admitted failed anyway: a bug, reported with its message.
void check(xdevError_t rc) {
  if (rc != xdevSuccess) {
    throw Error(ErrorKind::kInternal, strCat("xdev kernel: ", xdevGetLastErrorMessage()));
  }
}

}  // namespace

std::string HostDevice::busId() const { return strCat("host:", ordinal_); }

void* HostDevice::streamCapture(xcclStream_t stream) {
  XCCL_CHECK_ARG(stream == nullptr,
                 "a stream was given on a communicator of the host device, "
                 "which has none (create the communicator with deviceType xcclDeviceXdev)");
  return nullptr;
}

void* HostDevice::alloc(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) throw IoError(strCat("host device: cannot allocate ", bytes, " bytes"));
  return p;
}

void HostDevice::free(void* ptr) { std::free(ptr); }

void* HostDevice::allocShared(size_t bytes, std::string* handle) {
  SharedMapping m = createSharedMapping(bytes, "xccl-host-shared");
  *handle = std::to_string(m.fd);
  std::lock_guard<std::mutex> g(sharedMu_);
  shared_[m.base] = m;
  return m.base;
}

void* HostDevice::openShared(const std::string& handle, int ownerPid, size_t bytes) {
  char* end = nullptr;
  long fd = std::strtol(handle.c_str(), &end, 10);
  if (handle.empty() || *end != '\0' || fd < 0) {
    throw RemoteError(
        strCat("host device: malformed shared-memory handle '", handle.substr(0, 32), "'"));
  }
  SharedMapping m = openSharedMapping(ownerPid, fd, bytes, "a peer's shared host memory");
  std::lock_guard<std::mutex> g(sharedMu_);
  shared_[m.base] = m;
  return m.base;
}

void HostDevice::closeShared(void* ptr, size_t, bool) {
  SharedMapping m;
  {
    std::lock_guard<std::mutex> g(sharedMu_);
    auto it = shared_.find(ptr);
    if (it == shared_.end()) return;
    m = it->second;
    shared_.erase(it);
  }
  closeSharedMapping(m);
}

namespace {

// memcpy with non-temporal stores: written lines go to memory without first being read
// into the cache (no read-for-ownership) and without evicting the caller's working set.
void streamingCopy(char* dst, const char* src, size_t n) {
#if defined(__SSE2__)
  size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  head = head > n ? n : head;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();  // streaming stores are weakly ordered: publish them before returning
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace

void HostDevice::copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (dst == src || bytes == 0) return;
  if (kind == CopyKind::kStagingToDeviceNoReuse && bytes >= 4096) {
    streamingCopy(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

// One pass: each word is loaded once, hashed and stored (sum64Copy), where a copy and a
// second read of the destination cost twice the cache traffic; with streaming stores where
// copy() would use them.
void HostDevice::copyHashed(void* dst, const void* src, size_t bytes, CopyKind kind, uint64_t at,
                            uint64_t* hash) {
  if (bytes == 0) return;
  if (dst == src) {
    *hash = sum64Extend(*hash, at, src, bytes);
    return;
  }
  *hash = sum64Copy(*hash, at, dst, src, bytes,
                    kind == CopyKind::kStagingToDeviceNoReuse && bytes >= 4096);
}

// Sums of float32, bfloat16 and float16, the bulk of gradient traffic, add and hash in one
// pass (sum64AddFloats, sum64AddHalves; a pass to hash, then the reduction, cost 17 to 70 %
// more than the reduction alone on memory-resident data, the fused pass 3 %); the other
// types and ops hash, then reduce.
void HostDevice::reduceHashed(void* dst, const void* a, const void* b, size_t count,
                              xcclDataType_t dtype, xcclRedOp_t op, uint64_t at, uint64_t* hash) {
  if (dtype == xcclFloat32 && op == xcclSum) {
    *hash = sum64AddFloats(*hash, at, static_cast<float*>(dst), static_cast<const float*>(a),
                           static_cast<const float*>(b), count);
    return;
  }
  if ((dtype == xcclFloat16 || dtype == xcclBfloat16) && op == xcclSum) {
    *hash = sum64AddHalves(*hash, at, static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                           static_cast<const uint16_t*>(b), count, dtype == xcclBfloat16);
    return;
  }
  Device::reduceHashed(dst, a, b, count, dtype, op, at, hash);
}

// The kernels live in the xdev runtime (csrc/xdev/kernels.cc); the host device runs
// them on the calling thread, whose own ordering already makes the operands ready.
void HostDevice::reduce(void* dst, const void* a, const void* b, size_t count, xcclDataType_t dtype,
                        xcclRedOp_t op) {
  XCCL_CHECK_ARG(dtypeSize(dtype) != 0, "reduce: unknown data type ", static_cast<int>(dtype));
  XCCL_CHECK(opSupported(dtype, op) && op != xcclAvg && op != xcclPremulSum, "reduce: op ",
             xcclOpName(op), " is not an element-wise reduction for ", xcclTypeName(dtype),
             " (Avg and PremulSum are built from Sum)");
  check(xdevReduce(dst, a, b, count, static_cast<xdevDataType_t>(dtype),
                   static_cast<xdevRedOp_t>(op)));
}

void HostDevice::reduceCopy(void* const* dsts, int ndst, const void* const* srcs, int nsrc,
                            size_t count, xcclDataType_t dtype, xcclRedOp_t op) {
  XCCL_CHECK(opSupported(dtype, op) && op != xcclAvg && op != xcclPremulSum, "reduceCopy: op ",
             xcclOpName(op), " is not an element-wise reduction for ", xcclTypeName(dtype));
  check(xdevReduceCopy(dsts, ndst, srcs, nsrc, count, static_cast<xdevDataType_t>(dtype),
                       static_cast<xdevRedOp_t>(op)));
}

void HostDevice::scale(void* dst, const void* src, size_t count, xcclDataType_t dtype,
                       const void* scalar) {
  XCCL_CHECK_ARG(dtypeSize(dtype) != 0 && dtype != xcclBool, "scale: not defined for ",
                 xcclTypeName(dtype));
  check(xdevScale(dst, src, count, static_cast<xdevDataType_t>(dtype), scalar));
}

void HostDevice::divide(void* dst, size_t count, xcclDataType_t dtype, int64_t divisor) {
  XCCL_CHECK(divisor != 0, "divide by zero");
  XCCL_CHECK_ARG(dtypeSize(dtype) != 0 && dtype != xcclBool, "divide: not defined for ",
                 xcclTypeName(dtype));
  check(xdevDivide(dst, count, static_cast<xdevDataType_t>(dtype), divisor));
}

}  // namespace xccl
