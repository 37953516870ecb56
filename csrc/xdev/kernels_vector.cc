// The 16- and 8-bit floating loops with AVX2 and F16C (kernels_vector.h; the conversions are
// common/half_vector.h's). Each function carries the target attribute and runs only after
// narrowVectorAvailable() said yes, so the library still loads and runs on CPUs without them
// (the portable loops then serve).
#include "kernels_vector.h"

#include <cstdint>

#include "common/half_vector.h"

namespace xdev {

#if defined(__x86_64__)
namespace {

using xccl::halfvec::BF16;
using xccl::halfvec::E4M3;
using xccl::halfvec::E5M2;
using xccl::halfvec::F16;

// The ops as kernels.cc's: max is a < b ? b : a, min b < a ? b : a, which maxps/minps give
// with b as the first operand (they return the second when either is NaN or both are equal).
struct VSum {
  XCCL_HALF_VECTOR static __m256 apply(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
};
struct VProd {
  XCCL_HALF_VECTOR static __m256 apply(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
};
struct VMax {
  XCCL_HALF_VECTOR static __m256 apply(__m256 a, __m256 b) { return _mm256_max_ps(b, a); }
};
struct VMin {
  XCCL_HALF_VECTOR static __m256 apply(__m256 a, __m256 b) { return _mm256_min_ps(b, a); }
};

template <typename T, typename Op, typename E = typename T::Elem>
XCCL_HALF_VECTOR size_t reduceLoop(E* d, const E* a, const E* b, size_t n) {
  const size_t whole = n - n % 8;
  size_t i = 0;
  for (; i + 16 <= whole; i += 16) {
    T::store2(d + i, Op::apply(T::load(a + i), T::load(b + i)),
              Op::apply(T::load(a + i + 8), T::load(b + i + 8)));
  }
  if (i < whole) T::store(d + i, Op::apply(T::load(a + i), T::load(b + i)));
  return whole;
}

template <typename T, typename E = typename T::Elem>
size_t reduceAs(void* dst, const void* a, const void* b, size_t n, xdevRedOp_t op) {
  auto* d = static_cast<E*>(dst);
  const auto* x = static_cast<const E*>(a);
  const auto* y = static_cast<const E*>(b);
  switch (op) {
    case xdevSum:
      return reduceLoop<T, VSum>(d, x, y, n);
    case xdevProd:
      return reduceLoop<T, VProd>(d, x, y, n);
    case xdevMax:
      return reduceLoop<T, VMax>(d, x, y, n);
    case xdevMin:
      return reduceLoop<T, VMin>(d, x, y, n);
    default:
      return 0;
  }
}

template <typename T, typename E = typename T::Elem>
XCCL_HALF_VECTOR size_t scaleAs(void* dst, const void* src, size_t n, float s) {
  auto* d = static_cast<E*>(dst);
  const auto* x = static_cast<const E*>(src);
  const __m256 k = _mm256_set1_ps(s);
  const size_t whole = n - n % 8;
  for (size_t i = 0; i < whole; i += 8) T::store(d + i, _mm256_mul_ps(T::load(x + i), k));
  return whole;
}

template <typename T, typename E = typename T::Elem>
XCCL_HALF_VECTOR size_t divideAs(void* dst, size_t n, float divisor) {
  auto* d = static_cast<E*>(dst);
  const __m256 k = _mm256_set1_ps(divisor);
  const size_t whole = n - n % 8;
  for (size_t i = 0; i < whole; i += 8) T::store(d + i, _mm256_div_ps(T::load(d + i), k));
  return whole;
}

}  // namespace

bool narrowVectorAvailable() { return xccl::halfvec::available(); }

// fn(conversions) for the narrow type (F16, BF16, E4M3 or E5M2); 0 for another type, or where
// the loops cannot run.
template <typename Fn>
size_t byNarrowType(xdevDataType_t dtype, Fn&& fn) {
  if (!narrowVectorAvailable()) return 0;
  switch (dtype) {
    case xdevFloat16:
      return fn(F16{});
    case xdevBfloat16:
      return fn(BF16{});
    case xdevFloat8e4m3:
      return fn(E4M3{});
    case xdevFloat8e5m2:
      return fn(E5M2{});
    default:
      return 0;
  }
}

template <typename V>
XCCL_HALF_VECTOR size_t reduceCopyF32(float* const* d, int nd, const bool* stream,
                                      const float* const* s, int ns, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_loadu_ps(s[0] + i), a1 = _mm256_loadu_ps(s[0] + i + 8);
    __m256 a2 = _mm256_loadu_ps(s[0] + i + 16), a3 = _mm256_loadu_ps(s[0] + i + 24);
    for (int k = 1; k < ns; ++k) {  // the fold in source order: acc op s[k]
      a0 = V::apply(a0, _mm256_loadu_ps(s[k] + i));
      a1 = V::apply(a1, _mm256_loadu_ps(s[k] + i + 8));
      a2 = V::apply(a2, _mm256_loadu_ps(s[k] + i + 16));
      a3 = V::apply(a3, _mm256_loadu_ps(s[k] + i + 24));
    }
    for (int k = 0; k < nd; ++k) {
      float* o = d[k] + i;
      if (stream[k]) {
        _mm256_stream_ps(o, a0);
        _mm256_stream_ps(o + 8, a1);
        _mm256_stream_ps(o + 16, a2);
        _mm256_stream_ps(o + 24, a3);
      } else {
        _mm256_storeu_ps(o, a0);
        _mm256_storeu_ps(o + 8, a1);
        _mm256_storeu_ps(o + 16, a2);
        _mm256_storeu_ps(o + 24, a3);
      }
    }
  }
  return i;
}

size_t reduceCopyFloatVector(float* const* dsts, int ndst, const bool* stream,
                             const float* const* srcs, int nsrc, size_t count, xdevRedOp_t op) {
  if (!narrowVectorAvailable()) return 0;
  switch (op) {
    case xdevSum:
      return reduceCopyF32<VSum>(dsts, ndst, stream, srcs, nsrc, count);
    case xdevProd:
      return reduceCopyF32<VProd>(dsts, ndst, stream, srcs, nsrc, count);
    case xdevMax:
      return reduceCopyF32<VMax>(dsts, ndst, stream, srcs, nsrc, count);
    case xdevMin:
      return reduceCopyF32<VMin>(dsts, ndst, stream, srcs, nsrc, count);
    default:
      return 0;
  }
}

size_t reduceNarrowVector(void* dst, const void* a, const void* b, size_t count,
                          xdevDataType_t dtype, xdevRedOp_t op) {
  return byNarrowType(dtype, [&](auto t) { return reduceAs<decltype(t)>(dst, a, b, count, op); });
}

size_t scaleNarrowVector(void* dst, const void* src, size_t count, xdevDataType_t dtype, float s) {
  return byNarrowType(dtype, [&](auto t) { return scaleAs<decltype(t)>(dst, src, count, s); });
}

size_t divideNarrowVector(void* dst, size_t count, xdevDataType_t dtype, float divisor) {
  return byNarrowType(dtype, [&](auto t) { return divideAs<decltype(t)>(dst, count, divisor); });
}

#else  // not x86-64: the portable loops serve

bool narrowVectorAvailable() { return false; }
size_t reduceNarrowVector(void*, const void*, const void*, size_t, xdevDataType_t, xdevRedOp_t) {
  return 0;
}
size_t scaleNarrowVector(void*, const void*, size_t, xdevDataType_t, float) { return 0; }
size_t reduceCopyFloatVector(float* const*, int, const bool*, const float* const*, int, size_t,
                             xdevRedOp_t) {
  return 0;
}
size_t divideNarrowVector(void*, size_t, xdevDataType_t, float) { return 0; }

#endif

}  // namespace xdev
