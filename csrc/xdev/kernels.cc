// Element-wise kernels for every type: f32 f64 f16 bf16 fp8 (e4m3fn, e5m2) i8 u8 u16 i32 u32
// i64 u64 bool x sum prod min max, and band/bor/bxor for the integer types. The loops are
// written so the compiler vectorises them; 16- and 8-bit floats are widened to float32 for
// each step and rounded once (common/half.h).
#include "kernels.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/half.h"
#include "kernel_ops.h"
#include "kernels_vector.h"
#include "status.h"

namespace xdev {

using xccl::BFloat16;
using xccl::Float8E4M3;
using xccl::Float8E5M2;
using xccl::fromFloat;
using xccl::Half;
using xccl::toFloat;

namespace {

using ops::OpBand;
using ops::OpBor;
using ops::OpBxor;
using ops::OpMax;
using ops::OpMin;
using ops::OpProd;
using ops::OpSum;

// The floating types narrower than float32, computed in float32.
template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> ||
                         std::is_same_v<T, Float8E4M3> || std::is_same_v<T, Float8E5M2>;

template <typename Op, typename T>
void reduceLoop(T* dst, const T* a, const T* b, size_t n) {
  if constexpr (kIsHalf<T>) {
    for (size_t i = 0; i < n; ++i) {
      dst[i] = fromFloat(Op::apply(toFloat(a[i]), toFloat(b[i])), static_cast<T*>(nullptr));
    }
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], b[i]);
  }
}

// bool is stored as one byte 0/1: sum/max = or, prod/min = and.
void reduceBool(uint8_t* dst, const uint8_t* a, const uint8_t* b, size_t n, xdevRedOp_t op) {
  switch (op) {
    case xdevSum:
    case xdevMax:
    case xdevBor:
      for (size_t i = 0; i < n; ++i) dst[i] = (a[i] | b[i]) != 0;
      return;
    case xdevProd:
    case xdevMin:
    case xdevBand:
      for (size_t i = 0; i < n; ++i) dst[i] = (a[i] & b[i]) != 0;
      return;
    case xdevBxor:
      for (size_t i = 0; i < n; ++i) dst[i] = (a[i] != 0) != (b[i] != 0);
      return;
    default:
      return;  // excluded by checkReduce
  }
}

template <typename T>
void reduceTyped(void* dst, const void* a, const void* b, size_t n, xdevRedOp_t op) {
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  switch (op) {
    case xdevSum:
      return reduceLoop<OpSum>(d, x, y, n);
    case xdevProd:
      return reduceLoop<OpProd>(d, x, y, n);
    case xdevMax:
      return reduceLoop<OpMax>(d, x, y, n);
    case xdevMin:
      return reduceLoop<OpMin>(d, x, y, n);
    default:
      break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case xdevBand:
        return reduceLoop<OpBand>(d, x, y, n);
      case xdevBor:
        return reduceLoop<OpBor>(d, x, y, n);
      case xdevBxor:
        return reduceLoop<OpBxor>(d, x, y, n);
      default:
        break;
    }
  }
}

template <typename T, typename S>
void scaleTyped(void* dst, const void* src, size_t n, S s) {
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(src);
  if constexpr (kIsHalf<T>) {
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

template <typename T>
void divideTyped(void* dst, size_t n, int64_t divisor) {
  auto* d = static_cast<T*>(dst);
  if constexpr (kIsHalf<T>) {
    for (size_t i = 0; i < n; ++i) {
      d[i] = fromFloat(toFloat(d[i]) / static_cast<float>(divisor), static_cast<T*>(nullptr));
    }
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / static_cast<T>(divisor));
  }
}

// The 16- and 8-bit floats: the vector loops (kernels_vector.h) take what they can, the
// portable loops the rest (the tail, or everything on CPUs without AVX2 and F16C).
template <typename T>
void reduceNarrow(void* dst, const void* a, const void* b, size_t n, xdevDataType_t dtype,
                  xdevRedOp_t op) {
  const size_t done = reduceNarrowVector(dst, a, b, n, dtype, op);
  reduceTyped<T>(static_cast<T*>(dst) + done, static_cast<const T*>(a) + done,
                 static_cast<const T*>(b) + done, n - done, op);
}

template <typename T>
void scaleNarrow(void* dst, const void* src, size_t n, xdevDataType_t dtype, float s) {
  const size_t done = scaleNarrowVector(dst, src, n, dtype, s);
  scaleTyped<T>(static_cast<T*>(dst) + done, static_cast<const T*>(src) + done, n - done, s);
}

template <typename T>
void divideNarrow(void* dst, size_t n, xdevDataType_t dtype, int64_t divisor) {
  const size_t done = divideNarrowVector(dst, n, dtype, static_cast<float>(divisor));
  divideTyped<T>(static_cast<T*>(dst) + done, n - done, divisor);
}

bool isFloat(int t) {
  return t == xdevFloat16 || t == xdevFloat32 || t == xdevFloat64 || t == xdevBfloat16 ||
         t == xdevFloat8e4m3 || t == xdevFloat8e5m2;
}

}  // namespace

size_t typeSize(int dtype) {
  switch (dtype) {
    case xdevInt8:
    case xdevUint8:
    case xdevBool:
    case xdevFloat8e4m3:
    case xdevFloat8e5m2:
      return 1;
    case xdevFloat16:
    case xdevBfloat16:
    case xdevUint16:
      return 2;
    case xdevInt32:
    case xdevFloat32:
    case xdevUint32:
      return 4;
    case xdevInt64:
    case xdevFloat64:
    case xdevUint64:
      return 8;
    default:
      return 0;
  }
}

void checkReduce(const xdevDataType_t& dtype, const xdevRedOp_t& op) {
  const int t = rawValue(dtype), o = rawValue(op);
  XDEV_REQUIRE(typeSize(t) != 0, xdevErrorInvalidValue, "unknown data type ", t);
  bool ok = false;
  switch (o) {
    case xdevSum:
    case xdevProd:
    case xdevMax:
    case xdevMin:
      ok = true;
      break;
    case xdevBand:
    case xdevBor:
    case xdevBxor:
      ok = !isFloat(t);
      break;
    default:  // Avg, PremulSum: built by the caller from Sum, scale and divide
      break;
  }
  XDEV_REQUIRE(ok, xdevErrorInvalidValue, "op ", o,
               " is not an element-wise reduction for data type ", t);
}

void checkScale(const xdevDataType_t& dtype) {
  const int t = rawValue(dtype);
  XDEV_REQUIRE(typeSize(t) != 0 && t != xdevBool, xdevErrorInvalidValue,
               "scale is not defined for data type ", t);
}

void checkDivide(const xdevDataType_t& dtype, int64_t divisor) {
  const int t = rawValue(dtype);
  XDEV_REQUIRE(typeSize(t) != 0 && t != xdevBool, xdevErrorInvalidValue,
               "divide is not defined for data type ", t);
  XDEV_REQUIRE(divisor != 0, xdevErrorInvalidValue, "divide by zero");
}

void reduceKernel(void* dst, const void* a, const void* b, size_t count, xdevDataType_t dtype,
                  xdevRedOp_t op) {
  switch (dtype) {
    case xdevInt8:
      return reduceTyped<int8_t>(dst, a, b, count, op);
    case xdevUint8:
      return reduceTyped<uint8_t>(dst, a, b, count, op);
    case xdevInt32:
      return reduceTyped<int32_t>(dst, a, b, count, op);
    case xdevInt64:
      return reduceTyped<int64_t>(dst, a, b, count, op);
    case xdevFloat16:
      return reduceNarrow<Half>(dst, a, b, count, dtype, op);
    case xdevBfloat16:
      return reduceNarrow<BFloat16>(dst, a, b, count, dtype, op);
    case xdevFloat32:
      return reduceTyped<float>(dst, a, b, count, op);
    case xdevFloat64:
      return reduceTyped<double>(dst, a, b, count, op);
    case xdevBool:
      return reduceBool(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(a),
                        static_cast<const uint8_t*>(b), count, op);
    case xdevFloat8e4m3:
      return reduceNarrow<Float8E4M3>(dst, a, b, count, dtype, op);
    case xdevFloat8e5m2:
      return reduceNarrow<Float8E5M2>(dst, a, b, count, dtype, op);
    case xdevUint16:
      return reduceTyped<uint16_t>(dst, a, b, count, op);
    case xdevUint32:
      return reduceTyped<uint32_t>(dst, a, b, count, op);
    case xdevUint64:
      return reduceTyped<uint64_t>(dst, a, b, count, op);
    default:
      return;
  }
}

void scaleKernel(void* dst, const void* src, size_t count, xdevDataType_t dtype,
                 const void* scalar) {
  switch (dtype) {
    case xdevInt8:
      return scaleTyped<int8_t>(dst, src, count, loadScalar<int8_t>(scalar));
    case xdevUint8:
      return scaleTyped<uint8_t>(dst, src, count, loadScalar<uint8_t>(scalar));
    case xdevInt32:
      return scaleTyped<int32_t>(dst, src, count, loadScalar<int32_t>(scalar));
    case xdevInt64:
      return scaleTyped<int64_t>(dst, src, count, loadScalar<int64_t>(scalar));
    case xdevFloat16:
      return scaleNarrow<Half>(dst, src, count, dtype, toFloat(loadScalar<Half>(scalar)));
    case xdevBfloat16:
      return scaleNarrow<BFloat16>(dst, src, count, dtype, toFloat(loadScalar<BFloat16>(scalar)));
    case xdevFloat32:
      return scaleTyped<float>(dst, src, count, loadScalar<float>(scalar));
    case xdevFloat64:
      return scaleTyped<double>(dst, src, count, loadScalar<double>(scalar));
    case xdevFloat8e4m3:
      return scaleNarrow<Float8E4M3>(dst, src, count, dtype,
                                     toFloat(loadScalar<Float8E4M3>(scalar)));
    case xdevFloat8e5m2:
      return scaleNarrow<Float8E5M2>(dst, src, count, dtype,
                                     toFloat(loadScalar<Float8E5M2>(scalar)));
    case xdevUint16:
      return scaleTyped<uint16_t>(dst, src, count, loadScalar<uint16_t>(scalar));
    case xdevUint32:
      return scaleTyped<uint32_t>(dst, src, count, loadScalar<uint32_t>(scalar));
    case xdevUint64:
      return scaleTyped<uint64_t>(dst, src, count, loadScalar<uint64_t>(scalar));
    default:
      return;
  }
}

void divideKernel(void* dst, size_t count, xdevDataType_t dtype, int64_t divisor) {
  switch (dtype) {
    case xdevInt8:
      return divideTyped<int8_t>(dst, count, divisor);
    case xdevUint8:
      return divideTyped<uint8_t>(dst, count, divisor);
    case xdevInt32:
      return divideTyped<int32_t>(dst, count, divisor);
    case xdevInt64:
      return divideTyped<int64_t>(dst, count, divisor);
    case xdevFloat16:
      return divideNarrow<Half>(dst, count, dtype, divisor);
    case xdevBfloat16:
      return divideNarrow<BFloat16>(dst, count, dtype, divisor);
    case xdevFloat32:
      return divideTyped<float>(dst, count, divisor);
    case xdevFloat64:
      return divideTyped<double>(dst, count, divisor);
    case xdevFloat8e4m3:
      return divideNarrow<Float8E4M3>(dst, count, dtype, divisor);
    case xdevFloat8e5m2:
      return divideNarrow<Float8E5M2>(dst, count, dtype, divisor);
    case xdevUint16:
      return divideTyped<uint16_t>(dst, count, divisor);
    case xdevUint32:
      return divideTyped<uint32_t>(dst, count, divisor);
    case xdevUint64:
      return divideTyped<uint64_t>(dst, count, divisor);
    default:
      return;
  }
}

}  // namespace xdev
