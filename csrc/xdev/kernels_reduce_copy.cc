// reduceCopyKernel (kernels.h): the fold of n sources stored to m destinations in one pass,
// what the collectives' "mapped" allreduce and torch's symmetric-memory ops on xdev run.
#include <emmintrin.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernel_ops.h"
#include "kernels.h"
#include "kernels_vector.h"

namespace xdev {
namespace {

using ops::OpMax;
using ops::OpMin;
using ops::OpProd;
using ops::OpSum;

// reduceCopyKernel for the types computed as they are, a line of elements at a time: the
// fold of the line's sources, then the line stored to every destination (fixed-length loops,
// vectorised with the baseline SSE2); streaming stores to dsts[k] where stream[k].
// float32 has an AVX2 loop before it (kernels_vector.h); this one serves the others, the
// tail, and CPUs without AVX2.
template <typename Op, typename T>
void reduceCopyLoop(void* const* dsts, int nd, const bool* stream, const void* const* srcs, int ns,
                    size_t n) {
  constexpr size_t kB = 64 / sizeof(T);
  for (size_t i = 0; i < n; i += kB) {
    const size_t b = n - i < kB ? n - i : kB;
    alignas(16) T acc[kB];
    const T* s0 = static_cast<const T*>(srcs[0]) + i;
    if (b == kB) {
      for (size_t j = 0; j < kB; ++j) acc[j] = s0[j];
      for (int k = 1; k < ns; ++k) {
        const T* sk = static_cast<const T*>(srcs[k]) + i;
        for (size_t j = 0; j < kB; ++j) acc[j] = Op::apply(acc[j], sk[j]);
      }
    } else {
      for (size_t j = 0; j < b; ++j) acc[j] = s0[j];
      for (int k = 1; k < ns; ++k) {
        const T* sk = static_cast<const T*>(srcs[k]) + i;
        for (size_t j = 0; j < b; ++j) acc[j] = Op::apply(acc[j], sk[j]);
      }
    }
    for (int k = 0; k < nd; ++k) {
      T* d = static_cast<T*>(dsts[k]) + i;
      if (stream[k] && b == kB) {
        const auto* from = reinterpret_cast<const __m128i*>(acc);
        auto* to = reinterpret_cast<__m128i*>(d);
        for (size_t j = 0; j < sizeof(acc) / 16; ++j)
          _mm_stream_si128(to + j, _mm_load_si128(from + j));
      } else if (b == kB) {
        for (size_t j = 0; j < kB; ++j) d[j] = acc[j];
      } else {
        for (size_t j = 0; j < b; ++j) d[j] = acc[j];
      }
    }
  }
}

template <typename T>
bool reduceCopyTyped(void* const* dsts, int nd, const bool* stream, const void* const* srcs, int ns,
                     size_t n, xdevRedOp_t op) {
  switch (op) {
    case xdevSum:
      return reduceCopyLoop<OpSum, T>(dsts, nd, stream, srcs, ns, n), true;
    case xdevProd:
      return reduceCopyLoop<OpProd, T>(dsts, nd, stream, srcs, ns, n), true;
    case xdevMax:
      return reduceCopyLoop<OpMax, T>(dsts, nd, stream, srcs, ns, n), true;
    case xdevMin:
      return reduceCopyLoop<OpMin, T>(dsts, nd, stream, srcs, ns, n), true;
    default:
      return false;  // the bitwise ops: through reduceKernel, a block at a time
  }
}

// Calls of this many bytes or more store to a destination that is not a source with streaming
// stores: its lines are not fetched only to be overwritten, and a result that large would not
// stay in the cache. Two processes, out of place, 16 MiB (8 MiB a call): 1.0 against 1.9 ms,
// 64 MiB 6.2 against 9.3 ms; from 1 MiB a call, 4 MiB allreduces (2 MiB calls) lost to
// plain stores in one run (308 against 147 us), so calls start streaming at 4 MiB. In place
// the destinations are the sources, already in the cache.
constexpr size_t kStreamBytes = size_t{4} << 20;

// reduceCopyKernel past the vector loop: the common types fused, the others through
// reduceKernel and copies, 1 KiB at a time (in the cache).
void reduceCopyRest(void* const* dsts, int ndst, const bool* stream, const void* const* srcs,
                    int nsrc, size_t count, xdevDataType_t dtype, xdevRedOp_t op) {
  switch (dtype) {
    case xdevFloat32:
      if (reduceCopyTyped<float>(dsts, ndst, stream, srcs, nsrc, count, op)) return;
      break;
    case xdevFloat64:
      if (reduceCopyTyped<double>(dsts, ndst, stream, srcs, nsrc, count, op)) return;
      break;
    case xdevInt32:
      if (reduceCopyTyped<int32_t>(dsts, ndst, stream, srcs, nsrc, count, op)) return;
      break;
    case xdevInt64:
      if (reduceCopyTyped<int64_t>(dsts, ndst, stream, srcs, nsrc, count, op)) return;
      break;
    default:
      break;
  }
  const size_t es = typeSize(dtype);
  constexpr size_t kBlock = 1024;
  alignas(64) unsigned char acc[kBlock];
  const size_t per = kBlock / es;
  for (size_t o = 0; o < count; o += per) {
    const size_t c = count - o < per ? count - o : per, at = o * es;
    auto src = [&](int k) { return static_cast<const unsigned char*>(srcs[k]) + at; };
    if (nsrc == 1) {
      std::memcpy(acc, src(0), c * es);
    } else {
      reduceKernel(acc, src(0), src(1), c, dtype, op);
    }
    for (int k = 2; k < nsrc; ++k) reduceKernel(acc, acc, src(k), c, dtype, op);
    for (int k = 0; k < ndst; ++k)
      std::memcpy(static_cast<unsigned char*>(dsts[k]) + at, acc, c * es);
  }
}

}  // namespace

void reduceCopyKernel(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                      xdevDataType_t dtype, xdevRedOp_t op) {
  if (count == 0 || ndst < 1 || nsrc < 1) return;
  const size_t es = typeSize(dtype);
  // Streaming stores: a call of kStreamBytes or more, to a destination that is no source and
  // is 32-byte aligned (what every loop below needs for them).
  std::unique_ptr<bool[]> stream(new bool[ndst]());
  bool any = false;
  if (count * es >= kStreamBytes) {
    for (int k = 0; k < ndst; ++k) {
      bool source = false;
      for (int j = 0; j < nsrc; ++j) source = source || dsts[k] == srcs[j];
      stream[k] = !source && (reinterpret_cast<uintptr_t>(dsts[k]) & 31) == 0;
      any = any || stream[k];
    }
  }
  size_t done = 0;
  if (dtype == xdevFloat32) {
    done = reduceCopyFloatVector(reinterpret_cast<float* const*>(dsts), ndst, stream.get(),
                                 reinterpret_cast<const float* const*>(srcs), nsrc, count, op);
  }
  if (done < count) {
    std::vector<void*> d(ndst);
    std::vector<const void*> s(nsrc);
    for (int k = 0; k < ndst; ++k) d[k] = static_cast<unsigned char*>(dsts[k]) + done * es;
    for (int k = 0; k < nsrc; ++k) s[k] = static_cast<const unsigned char*>(srcs[k]) + done * es;
    reduceCopyRest(d.data(), ndst, stream.get(), s.data(), nsrc, count - done, dtype, op);
  }
  if (any) _mm_sfence();  // streaming stores are weakly ordered: done before the caller says so
}

}  // namespace xdev
