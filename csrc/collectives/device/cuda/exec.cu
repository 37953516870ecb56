// The executor kernel (exec.h): polls its mailbox in mapped host memory, runs each posted
// command across the whole grid, and reports completion once every block is done with it.
#include "exec.h"
#include "kernel_ops.cuh"
#include "xccl.h"

namespace xccl {
namespace cuda {
namespace {

using namespace ops;  // NOLINT(google-build-using-namespace): the kernels' vocabulary

// Bytes: 16-byte packs when everything is 16-byte aligned, else 4-byte words, else bytes.
__device__ void copyRange(char* dst, const char* src, size_t n, size_t first, size_t stride) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  size_t done = 0;
  if ((mis & 15) == 0) {
    const size_t packs = n / 16;
    for (size_t p = first; p < packs; p += stride)
      reinterpret_cast<uint4*>(dst)[p] = reinterpret_cast<const uint4*>(src)[p];
    done = packs * 16;
  } else if ((mis & 3) == 0) {
    const size_t words = n / 4;
    for (size_t p = first; p < words; p += stride)
      reinterpret_cast<uint32_t*>(dst)[p] = reinterpret_cast<const uint32_t*>(src)[p];
    done = words * 4;
  }
  for (size_t e = done + first; e < n; e += stride) dst[e] = src[e];
}

template <typename T>
__device__ void reduceTyped(const ExecCommand& c, size_t first, size_t stride) {
  auto* d = reinterpret_cast<T*>(c.dst);
  auto* a = reinterpret_cast<const T*>(c.a);
  auto* b = reinterpret_cast<const T*>(c.b);
  const bool packed = ((c.dst | c.a | c.b) & 15) == 0;
  switch (c.op) {
    case xcclSum:
      return reduceRange<T, Sum>(d, a, b, c.count, packed, first, stride);
    case xcclProd:
      return reduceRange<T, Prod>(d, a, b, c.count, packed, first, stride);
    case xcclMax:
      return reduceRange<T, Max>(d, a, b, c.count, packed, first, stride);
    case xcclMin:
      return reduceRange<T, Min>(d, a, b, c.count, packed, first, stride);
    default:
      break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (c.op) {
      case xcclBand:
        return reduceRange<T, Band>(d, a, b, c.count, packed, first, stride);
      case xcclBor:
        return reduceRange<T, Bor>(d, a, b, c.count, packed, first, stride);
      case xcclBxor:
        return reduceRange<T, Bxor>(d, a, b, c.count, packed, first, stride);
      default:
        break;
    }
  }
  __trap();  // the host checked the op: a bad command is a bug, not a result
}

__device__ void reduceBool(const ExecCommand& c, size_t first, size_t stride) {
  auto* d = reinterpret_cast<uint8_t*>(c.dst);
  auto* a = reinterpret_cast<const uint8_t*>(c.a);
  auto* b = reinterpret_cast<const uint8_t*>(c.b);
  const bool packed = ((c.dst | c.a | c.b) & 15) == 0;
  switch (c.op) {
    case xcclSum:
    case xcclMax:
    case xcclBor:
      return reduceRange<uint8_t, BoolOr>(d, a, b, c.count, packed, first, stride);
    case xcclProd:
    case xcclMin:
    case xcclBand:
      return reduceRange<uint8_t, BoolAnd>(d, a, b, c.count, packed, first, stride);
    case xcclBxor:
      return reduceRange<uint8_t, BoolXor>(d, a, b, c.count, packed, first, stride);
    default:
      __trap();
  }
}

template <typename T>
__device__ void scaleTyped(const ExecCommand& c, size_t first, size_t stride) {
  T v;
  memcpy(&v, &c.scalar, sizeof(T));
  using A = typename Arith<T>::type;
  const A factor = Arith<T>::load(v);
  scaleRange<T, A>(reinterpret_cast<T*>(c.dst), reinterpret_cast<const T*>(c.a), c.count, factor,
                   first, stride);
}

template <typename T>
__device__ void divideTyped(const ExecCommand& c, size_t first, size_t stride) {
  divideRange<T>(reinterpret_cast<T*>(c.dst), c.count, static_cast<int64_t>(c.scalar), first,
                 stride);
}

// f<T>() for the element type of every dtype but bool.
#define XCCL_EXEC_TYPED(fn, dtype, ...)      \
  switch (dtype) {                           \
    case xcclInt8:                           \
      return fn<int8_t>(__VA_ARGS__);        \
    case xcclUint8:                          \
      return fn<uint8_t>(__VA_ARGS__);       \
    case xcclInt32:                          \
      return fn<int32_t>(__VA_ARGS__);       \
    case xcclInt64:                          \
      return fn<int64_t>(__VA_ARGS__);       \
    case xcclUint16:                         \
      return fn<uint16_t>(__VA_ARGS__);      \
    case xcclUint32:                         \
      return fn<uint32_t>(__VA_ARGS__);      \
    case xcclUint64:                         \
      return fn<uint64_t>(__VA_ARGS__);      \
    case xcclFloat16:                        \
      return fn<__half>(__VA_ARGS__);        \
    case xcclBfloat16:                       \
      return fn<__nv_bfloat16>(__VA_ARGS__); \
    case xcclFloat32:                        \
      return fn<float>(__VA_ARGS__);         \
    case xcclFloat64:                        \
      return fn<double>(__VA_ARGS__);        \
    default:                                 \
      __trap();                              \
  }

__device__ void run(const ExecCommand& c, size_t first, size_t stride) {
  switch (c.kind) {
    case kExecCopy:
      return copyRange(reinterpret_cast<char*>(c.dst), reinterpret_cast<const char*>(c.a), c.count,
                       first, stride);
    case kExecReduce:
      if (c.dtype == xcclBool) return reduceBool(c, first, stride);
      XCCL_EXEC_TYPED(reduceTyped, c.dtype, c, first, stride)
    case kExecScale:
      XCCL_EXEC_TYPED(scaleTyped, c.dtype, c, first, stride)
    case kExecDivide:
      XCCL_EXEC_TYPED(divideTyped, c.dtype, c, first, stride)
    default:
      __trap();
  }
}

__global__ void __launch_bounds__(kExecThreads)
    execKernel(ExecMailbox* mailbox, unsigned* arrive, bool trapOnFail) {
  volatile ExecMailbox* mb = mailbox;
  __shared__ ExecCommand cmd;
  __shared__ uint32_t stopped;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    mb->started = 1;
    __threadfence_system();
  }
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (uint32_t next = 1;; ++next) {
    if (threadIdx.x == 0) {
      uint32_t stop = 0;
      unsigned misses = 0;
      // A command posted before the stop is run first (the host stops only after the last
      // command completed, so that is the normal order too).
      while (mb->posted < next) {
        if ((stop = mb->stop) != 0) break;
        if (++misses > 4096) __nanosleep(500);  // a long wait: poll the bus less often
      }
      if (stop == 0) {
        __threadfence_system();  // the command's words after the `posted` that announced it
        const volatile uint64_t* src = reinterpret_cast<const volatile uint64_t*>(&mb->cmd);
        auto* dst = reinterpret_cast<uint64_t*>(&cmd);
        for (unsigned i = 0; i < sizeof(ExecCommand) / 8; ++i) dst[i] = src[i];
      }
      stopped = stop;
    }
    __syncthreads();
    if (stopped != 0) {
      if (stopped == 2 && trapOnFail) __trap();
      return;
    }
    run(cmd, first, stride);
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();  // this block's writes (device or mapped host memory) first
      if (atomicAdd(arrive, 1u) == gridDim.x - 1) {
        atomicExch(arrive, 0u);  // no block passes `next + 1` before `completed` says so
        __threadfence_system();
        mb->completed = next;
      }
    }
    __syncthreads();  // `cmd` and `stopped` are rewritten for the next command
  }
}

}  // namespace

cudaError_t launchExec(ExecMailbox* mailbox, unsigned* arrive, bool trapOnFail, unsigned blocks,
                       cudaStream_t stream) {
  execKernel<<<blocks, kExecThreads, 0, stream>>>(mailbox, arrive, trapOnFail);
  return cudaGetLastError();
}

cudaError_t preloadExec() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, execKernel);
}

}  // namespace cuda
}  // namespace xccl
