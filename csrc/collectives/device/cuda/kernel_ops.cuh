// The element-wise arithmetic of the CUDA device, shared by its one-shot kernels (kernels.cu)
// and the executor kernel that runs a collective's steps on the caller's stream (exec.cu):
// element types and the type their arithmetic is done in, the reduction ops, and grid-stride
// loops over a range. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace xccl {
namespace cuda {
namespace ops {

// ---- element types: the type the arithmetic is done in, and the conversions ----
template <typename T>
struct Arith {
  using type = T;
  __device__ static T load(T v) { return v; }
  __device__ static T store(T v) { return v; }
};
template <>
struct Arith<__half> {
  using type = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Arith<__nv_bfloat16> {
  using type = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

// ---- operations, on the arithmetic type ----
struct Sum {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return a + b;
  }
};
struct Prod {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return a * b;
  }
};
struct Max {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return a < b ? b : a;
  }
};
struct Min {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return b < a ? b : a;
  }
};
struct Band {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return a & b;
  }
};
struct Bor {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return a | b;
  }
};
struct Bxor {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return a ^ b;
  }
};
// bool bytes: any non-zero byte is true, results are 0/1.
struct BoolOr {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return (a | b) != 0;
  }
};
struct BoolAnd {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return (a != 0) & (b != 0);
  }
};
struct BoolXor {
  template <typename A>
  __device__ static A apply(A a, A b) {
    return (a != 0) != (b != 0);
  }
};

template <typename T, typename Op>
__device__ __forceinline__ T reduceOne(T a, T b) {
  using R = Arith<T>;
  return R::store(Op::apply(R::load(a), R::load(b)));
}

// 16 bytes as elements of T.
template <typename T>
union Pack {
  static constexpr int kElems = 16 / sizeof(T);
  uint4 raw;
  T e[kElems];
};

// dst[i] = a[i] (op) b[i] for the indices i = first, first + stride, ... < n: 16-byte packs
// when `packed` (every pointer 16-byte aligned), then the tail element by element.
template <typename T, typename Op>
__device__ __forceinline__ void reduceRange(T* dst, const T* a, const T* b, size_t n, bool packed,
                                            size_t first, size_t stride) {
  size_t done = 0;
  if (packed) {
    constexpr int k = Pack<T>::kElems;
    const size_t packs = n / k;
    for (size_t p = first; p < packs; p += stride) {
      Pack<T> x, y, z;
      x.raw = reinterpret_cast<const uint4*>(a)[p];
      y.raw = reinterpret_cast<const uint4*>(b)[p];
#pragma unroll
      for (int j = 0; j < k; ++j) z.e[j] = reduceOne<T, Op>(x.e[j], y.e[j]);
      reinterpret_cast<uint4*>(dst)[p] = z.raw;
    }
    done = packs * k;
  }
  for (size_t e = done + first; e < n; e += stride) dst[e] = reduceOne<T, Op>(a[e], b[e]);
}

// dst[i] = src[i] * s (s in the arithmetic type; integers multiply in their own type).
template <typename T, typename S>
__device__ __forceinline__ void scaleRange(T* dst, const T* src, size_t n, S s, size_t first,
                                           size_t stride) {
  for (size_t e = first; e < n; e += stride) {
    using R = Arith<T>;
    if constexpr (std::is_integral_v<T>) {
      dst[e] = static_cast<T>(src[e] * s);
    } else {
      dst[e] = R::store(R::load(src[e]) * s);
    }
  }
}

// dst[i] /= divisor (integer division for integer types).
template <typename T>
__device__ __forceinline__ void divideRange(T* dst, size_t n, int64_t divisor, size_t first,
                                            size_t stride) {
  for (size_t e = first; e < n; e += stride) {
    using R = Arith<T>;
    if constexpr (std::is_integral_v<T>) {
      dst[e] = static_cast<T>(dst[e] / static_cast<T>(divisor));
    } else {
      using A = typename R::type;
      dst[e] = R::store(R::load(dst[e]) / static_cast<A>(divisor));
    }
  }
}

}  // namespace ops
}  // namespace cuda
}  // namespace xccl
