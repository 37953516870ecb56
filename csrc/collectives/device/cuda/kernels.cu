// The CUDA device's element-wise kernels: reduce (every dtype x Sum Prod Max Min, and
// Band Bor Bxor for integers and bool), scale and divide. Same results as the host reference
// (csrc/xdev/kernels.cc): 16-bit floats widened to float for each step and rounded
// once, bool as bytes 0/1, integer scale and divide in the element type.
//
// Memory access: a grid-stride loop over 16-byte packs when every pointer is 16-byte aligned
// (the usual case: tensors and ring slots are), one element per step otherwise; the few
// elements after the last whole pack are done element by element.
#include <type_traits>

#include "kernel_ops.cuh"
#include "kernels.h"

namespace xccl {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

using namespace ops;  // NOLINT(google-build-using-namespace): the kernels' vocabulary

template <typename T, typename Op>
__global__ void reduceKernel(T* dst, const T* a, const T* b, size_t n, bool packed) {
  reduceRange<T, Op>(dst, a, b, n, packed,
                     static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                     static_cast<size_t>(gridDim.x) * blockDim.x);
}

template <typename T, typename S>
__global__ void scaleKernel(T* dst, const T* src, size_t n, S s) {
  scaleRange<T, S>(dst, src, n, s, static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                   static_cast<size_t>(gridDim.x) * blockDim.x);
}

template <typename T>
__global__ void divideKernel(T* dst, size_t n, int64_t divisor) {
  divideRange<T>(dst, n, divisor, static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                 static_cast<size_t>(gridDim.x) * blockDim.x);
}

// A hold's word: 0 held, 1 released, 2 failed. A failed hold faults the context (__trap):
// CUDA has no way to fail a stream from the host, and the work queued behind the hold must
// not read the failed collective's outputs as results.
__global__ void waitFlagKernel(const volatile uint32_t* flag, bool trapOnFail) {
  uint32_t v;
  while ((v = *flag) == 0) __nanosleep(2000);
  if (trapOnFail && v == 2) __trap();
}

__global__ void checkFlagKernel(const volatile uint32_t* flag) {
  if (*flag == 2) __trap();
}

unsigned blocksFor(size_t work) {
  size_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T>
struct Type {
  using type = T;
};

// f(Type<T>{}) for the element type of every dtype but bool.
template <typename F>
cudaError_t withType(xcclDataType_t dtype, F&& f) {
  switch (dtype) {
    case xcclInt8:
      return f(Type<int8_t>{});
    case xcclUint8:
      return f(Type<uint8_t>{});
    case xcclInt32:
      return f(Type<int32_t>{});
    case xcclInt64:
      return f(Type<int64_t>{});
    case xcclUint16:
      return f(Type<uint16_t>{});
    case xcclUint32:
      return f(Type<uint32_t>{});
    case xcclUint64:
      return f(Type<uint64_t>{});
    case xcclFloat16:
      return f(Type<__half>{});
    case xcclBfloat16:
      return f(Type<__nv_bfloat16>{});
    case xcclFloat32:
      return f(Type<float>{});
    case xcclFloat64:
      return f(Type<double>{});
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T, typename Op>
cudaError_t reduceAs(void* dst, const void* a, const void* b, size_t n, cudaStream_t s) {
  const bool packed = aligned16(dst) && aligned16(a) && aligned16(b);
  const size_t work = packed ? n / Pack<T>::kElems + Pack<T>::kElems : n;
  reduceKernel<T, Op><<<blocksFor(work), kThreads, 0, s>>>(
      static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), n, packed);
  return cudaGetLastError();
}

template <typename T>
cudaError_t reduceTyped(void* dst, const void* a, const void* b, size_t n, xcclRedOp_t op,
                        cudaStream_t s) {
  switch (op) {
    case xcclSum:
      return reduceAs<T, Sum>(dst, a, b, n, s);
    case xcclProd:
      return reduceAs<T, Prod>(dst, a, b, n, s);
    case xcclMax:
      return reduceAs<T, Max>(dst, a, b, n, s);
    case xcclMin:
      return reduceAs<T, Min>(dst, a, b, n, s);
    default:
      break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case xcclBand:
        return reduceAs<T, Band>(dst, a, b, n, s);
      case xcclBor:
        return reduceAs<T, Bor>(dst, a, b, n, s);
      case xcclBxor:
        return reduceAs<T, Bxor>(dst, a, b, n, s);
      default:
        break;
    }
  }
  return cudaErrorInvalidValue;
}

cudaError_t reduceBool(void* dst, const void* a, const void* b, size_t n, xcclRedOp_t op,
                       cudaStream_t s) {
  switch (op) {
    case xcclSum:
    case xcclMax:
    case xcclBor:
      return reduceAs<uint8_t, BoolOr>(dst, a, b, n, s);
    case xcclProd:
    case xcclMin:
    case xcclBand:
      return reduceAs<uint8_t, BoolAnd>(dst, a, b, n, s);
    case xcclBxor:
      return reduceAs<uint8_t, BoolXor>(dst, a, b, n, s);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T, typename S>
cudaError_t scaleAs(void* dst, const void* src, size_t n, S s, cudaStream_t st) {
  scaleKernel<T, S>
      <<<blocksFor(n), kThreads, 0, st>>>(static_cast<T*>(dst), static_cast<const T*>(src), n, s);
  return cudaGetLastError();
}

template <typename T>
T scalarOf(const void* p) {
  T v;
  memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
cudaError_t divideAs(void* dst, size_t n, int64_t divisor, cudaStream_t s) {
  divideKernel<T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<T*>(dst), n, divisor);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count,
                         xcclDataType_t dtype, xcclRedOp_t op, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  if (dtype == xcclBool) return reduceBool(dst, a, b, count, op, s);
  return withType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return reduceTyped<T>(dst, a, b, count, op, s);
  });
}

cudaError_t launchScale(void* dst, const void* src, size_t count, xcclDataType_t dtype,
                        const void* scalar, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  return withType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = typename Arith<T>::type;  // the 16-bit floats scale in float
    T v = scalarOf<T>(scalar);
    A factor;
    if constexpr (std::is_same_v<T, __half>) {
      factor = __half2float(v);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      factor = __bfloat162float(v);
    } else {
      factor = v;
    }
    return scaleAs<T>(dst, src, count, factor, s);
  });
}

cudaError_t launchDivide(void* dst, size_t count, xcclDataType_t dtype, int64_t divisor,
                         cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  if (divisor == 0) return cudaErrorInvalidValue;
  return withType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return divideAs<T>(dst, count, divisor, s);
  });
}

namespace {

template <typename K>
cudaError_t load(K kernel) {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, kernel);
}

template <typename T>
cudaError_t loadAll() {
  cudaError_t e = cudaSuccess;
  auto keep = [&e](cudaError_t r) {
    if (e == cudaSuccess) e = r;
  };
  keep(load(reduceKernel<T, Sum>));
  keep(load(reduceKernel<T, Prod>));
  keep(load(reduceKernel<T, Max>));
  keep(load(reduceKernel<T, Min>));
  if constexpr (std::is_integral_v<T>) {
    keep(load(reduceKernel<T, Band>));
    keep(load(reduceKernel<T, Bor>));
    keep(load(reduceKernel<T, Bxor>));
  }
  keep(load(scaleKernel<T, typename Arith<T>::type>));
  keep(load(divideKernel<T>));
  return e;
}

}  // namespace

cudaError_t preloadKernels() {
  cudaError_t e = cudaSuccess;
  auto keep = [&e](cudaError_t r) {
    if (e == cudaSuccess) e = r;
  };
  for (xcclDataType_t t : {xcclInt8, xcclUint8, xcclInt32, xcclInt64, xcclFloat16, xcclBfloat16,
                           xcclFloat32, xcclFloat64}) {
    keep(withType(t, [](auto tag) { return loadAll<typename decltype(tag)::type>(); }));
  }
  keep(load(reduceKernel<uint8_t, BoolOr>));
  keep(load(reduceKernel<uint8_t, BoolAnd>));
  keep(load(reduceKernel<uint8_t, BoolXor>));
  keep(load(waitFlagKernel));
  keep(load(checkFlagKernel));
  return e;
}

cudaError_t launchWaitFlag(const volatile uint32_t* flag, bool trapOnFail, cudaStream_t s) {
  waitFlagKernel<<<1, 1, 0, s>>>(flag, trapOnFail);
  return cudaGetLastError();
}

cudaError_t launchCheckFlag(const volatile uint32_t* flag, cudaStream_t s) {
  checkFlagKernel<<<1, 1, 0, s>>>(flag);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace xccl
