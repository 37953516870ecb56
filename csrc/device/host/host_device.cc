#include "host_device.h"

#include <cstdlib>
#include <cstring>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/error.h"
#include "device/dtype.h"

namespace xccl {

namespace {

// Element-wise binary ops. Integer and bool types use their own arithmetic; the 16-bit
// float types are widened to float32 for each step and rounded back once.
struct OpSum {
  template <typename T>
  static T apply(T a, T b) {
    return a + b;
  }
};
struct OpProd {
  template <typename T>
  static T apply(T a, T b) {
    return a * b;
  }
};
struct OpMax {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};
struct OpMin {
  template <typename T>
  static T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct OpBand {
  template <typename T>
  static T apply(T a, T b) {
    return a & b;
  }
};
struct OpBor {
  template <typename T>
  static T apply(T a, T b) {
    return a | b;
  }
};
struct OpBxor {
  template <typename T>
  static T apply(T a, T b) {
    return a ^ b;
  }
};

template <typename Op, typename T>
void reduceLoop(T* dst, const T* a, const T* b, size_t n) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    for (size_t i = 0; i < n; ++i) {
      dst[i] = fromFloat(Op::apply(toFloat(a[i]), toFloat(b[i])), static_cast<T*>(nullptr));
    }
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], b[i]);
  }
}

// bool is stored as one byte 0/1: sum/max = or, prod/min = and.
void reduceBool(uint8_t* dst, const uint8_t* a, const uint8_t* b, size_t n, xcclRedOp_t op) {
  switch (op) {
    case xcclSum:
    case xcclMax:
    case xcclBor:
      for (size_t i = 0; i < n; ++i) dst[i] = (a[i] | b[i]) != 0;
      return;
    case xcclProd:
    case xcclMin:
    case xcclBand:
      for (size_t i = 0; i < n; ++i) dst[i] = (a[i] & b[i]) != 0;
      return;
    case xcclBxor:
      for (size_t i = 0; i < n; ++i) dst[i] = (a[i] != 0) != (b[i] != 0);
      return;
    default:
      throw InvalidUsage(strCat("reduce: op ", xcclOpName(op), " is not defined for bool"));
  }
}

template <typename T>
void reduceTyped(void* dst, const void* a, const void* b, size_t n, xcclRedOp_t op) {
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  switch (op) {
    case xcclSum:
      return reduceLoop<OpSum>(d, x, y, n);
    case xcclProd:
      return reduceLoop<OpProd>(d, x, y, n);
    case xcclMax:
      return reduceLoop<OpMax>(d, x, y, n);
    case xcclMin:
      return reduceLoop<OpMin>(d, x, y, n);
    default:
      break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case xcclBand:
        return reduceLoop<OpBand>(d, x, y, n);
      case xcclBor:
        return reduceLoop<OpBor>(d, x, y, n);
      case xcclBxor:
        return reduceLoop<OpBxor>(d, x, y, n);
      default:
        break;
    }
  }
  throw InvalidUsage(strCat("reduce: op ", xcclOpName(op),
                            " is not an element-wise reduction "
                            "for this type (Avg and PremulSum are built from Sum)"));
}

template <typename T, typename S>
void scaleTyped(void* dst, const void* src, size_t n, S s) {
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(src);
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    for (size_t i = 0; i < n; ++i) d[i] = fromFloat(toFloat(x[i]) * s, static_cast<T*>(nullptr));
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(x[i] * s);
  }
}

template <typename T>
T loadScalar(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::string HostDevice::busId() const { return strCat("host:", ordinal_); }

void* HostDevice::alloc(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) throw IoError(strCat("host device: cannot allocate ", bytes, " bytes"));
  return p;
}

void HostDevice::free(void* ptr) { std::free(ptr); }

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

void HostDevice::reduce(void* dst, const void* a, const void* b, size_t count, xcclDataType_t dtype,
                        xcclRedOp_t op) {
  switch (dtype) {
    case xcclInt8:
      return reduceTyped<int8_t>(dst, a, b, count, op);
    case xcclUint8:
      return reduceTyped<uint8_t>(dst, a, b, count, op);
    case xcclInt32:
      return reduceTyped<int32_t>(dst, a, b, count, op);
    case xcclInt64:
      return reduceTyped<int64_t>(dst, a, b, count, op);
    case xcclFloat16:
      return reduceTyped<Half>(dst, a, b, count, op);
    case xcclBfloat16:
      return reduceTyped<BFloat16>(dst, a, b, count, op);
    case xcclFloat32:
      return reduceTyped<float>(dst, a, b, count, op);
    case xcclFloat64:
      return reduceTyped<double>(dst, a, b, count, op);
    case xcclBool:
      return reduceBool(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(a),
                        static_cast<const uint8_t*>(b), count, op);
    default:
      throw InvalidArgument(strCat("reduce: unknown data type ", static_cast<int>(dtype)));
  }
}

void HostDevice::scale(void* dst, const void* src, size_t count, xcclDataType_t dtype,
                       const void* scalar) {
  switch (dtype) {
    case xcclInt8:
      return scaleTyped<int8_t>(dst, src, count, loadScalar<int8_t>(scalar));
    case xcclUint8:
      return scaleTyped<uint8_t>(dst, src, count, loadScalar<uint8_t>(scalar));
    case xcclInt32:
      return scaleTyped<int32_t>(dst, src, count, loadScalar<int32_t>(scalar));
    case xcclInt64:
      return scaleTyped<int64_t>(dst, src, count, loadScalar<int64_t>(scalar));
    case xcclFloat16:
      return scaleTyped<Half>(dst, src, count, toFloat(loadScalar<Half>(scalar)));
    case xcclBfloat16:
      return scaleTyped<BFloat16>(dst, src, count, toFloat(loadScalar<BFloat16>(scalar)));
    case xcclFloat32:
      return scaleTyped<float>(dst, src, count, loadScalar<float>(scalar));
    case xcclFloat64:
      return scaleTyped<double>(dst, src, count, loadScalar<double>(scalar));
    default:
      throw InvalidArgument(strCat("scale: not defined for ", xcclTypeName(dtype)));
  }
}

void HostDevice::divide(void* dst, size_t count, xcclDataType_t dtype, int64_t divisor) {
  XCCL_CHECK(divisor != 0, "divide by zero");
  auto div = [&](auto* d) {
    using T = std::remove_pointer_t<decltype(d)>;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      for (size_t i = 0; i < count; ++i) {
        d[i] = fromFloat(toFloat(d[i]) / static_cast<float>(divisor), static_cast<T*>(nullptr));
      }
    } else {
      for (size_t i = 0; i < count; ++i) d[i] = static_cast<T>(d[i] / static_cast<T>(divisor));
    }
  };
  switch (dtype) {
    case xcclInt8:
      return div(static_cast<int8_t*>(dst));
    case xcclUint8:
      return div(static_cast<uint8_t*>(dst));
    case xcclInt32:
      return div(static_cast<int32_t*>(dst));
    case xcclInt64:
      return div(static_cast<int64_t*>(dst));
    case xcclFloat16:
      return div(static_cast<Half*>(dst));
    case xcclBfloat16:
      return div(static_cast<BFloat16*>(dst));
    case xcclFloat32:
      return div(static_cast<float*>(dst));
    case xcclFloat64:
      return div(static_cast<double*>(dst));
    default:
      throw InvalidArgument(strCat("divide: not defined for ", xcclTypeName(dtype)));
  }
}

}  // namespace xccl
