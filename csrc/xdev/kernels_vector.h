// Vector loops for the 16- and 8-bit floating types (kernels.cc). The portable loops widen
// each element through common/half.h: for float16 without the F16C instructions that is a
// library call per conversion (measured 0.08 GB/s, a three-hundredth of a float32 sum), for
// bfloat16 a scalar round per element (3.7 GB/s), for FP8 branchy scalar code (0.2 GB/s).
// Where the CPU has AVX2 and F16C, these convert eight elements at a time with the same
// results, bit for bit (common/half_vector.h).
#pragma once

#include <cstddef>

#include "xdev_runtime.h"

namespace xdev {

// Whether the loops below can run here (AVX2 and F16C).
bool narrowVectorAvailable();

// dst[i] = a[i] op b[i] for the first count - count % 8 elements (op Sum, Prod, Max or Min;
// dtype xdevFloat16, xdevBfloat16, xdevFloat8e4m3 or xdevFloat8e5m2); returns how many it
// did, 0 when it cannot run here.
// The caller finishes the rest with the portable loop.
size_t reduceNarrowVector(void* dst, const void* a, const void* b, size_t count,
                          xdevDataType_t dtype, xdevRedOp_t op);
// reduceCopyKernel (kernels.h) for float32 with AVX2 (op Sum, Prod, Max or Min): the first
// count - count % 32 elements, 32 at a time in registers, stored to every destination;
// streaming stores to dsts[k] where stream[k] (dsts[k] 32-byte aligned). Returns how many it
// did, 0 when it cannot run here. The portable loop (SSE2, the library's baseline) took 37 us
// for a 1 MiB allreduce in place between two processes and 149 us at 4 MiB; this one 23 and
// 87 (a hand-written AVX2 loop: 20 and 71).
size_t reduceCopyFloatVector(float* const* dsts, int ndst, const bool* stream,
                             const float* const* srcs, int nsrc, size_t count, xdevRedOp_t op);
// dst[i] = src[i] * s, rounded once, for the same types; returns how many it did.
size_t scaleNarrowVector(void* dst, const void* src, size_t count, xdevDataType_t dtype, float s);
// dst[i] = dst[i] / divisor, rounded once; returns how many it did.
size_t divideNarrowVector(void* dst, size_t count, xdevDataType_t dtype, float divisor);

}  // namespace xdev
