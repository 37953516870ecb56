// The reduction kernels of the xdev runtime: loops over host-addressable memory, run by a
// stream's worker (xdevReduceAsync ...) or on the caller's thread (xdevReduce ...).
#pragma once

#include <cstddef>
#include <cstdint>

#include "xdev_runtime.h"

namespace xdev {

// Bytes of one element; 0 for an unknown type.
size_t typeSize(int dtype);
// Throws Failure(xdevErrorInvalidValue) naming the problem when the kernel is not defined
// for these arguments; the kernels below assume this passed. The enums are the caller's,
// unchecked, hence by reference (status.h, rawValue).
void checkReduce(const xdevDataType_t& dtype, const xdevRedOp_t& op);
void checkScale(const xdevDataType_t& dtype);
void checkDivide(const xdevDataType_t& dtype, int64_t divisor);

// dst[i] = a[i] op b[i] (dst may equal a or b).
void reduceKernel(void* dst, const void* a, const void* b, size_t count, xdevDataType_t dtype,
                  xdevRedOp_t op);
// dsts[k][i] = ((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ... for every k < ndst (nsrc >= 1):
// the sources are read once and each block of the result is stored to every destination while
// the block's sources are still in the cache. Any destination may be any source (each block is
// read whole before it is written).
void reduceCopyKernel(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                      xdevDataType_t dtype, xdevRedOp_t op);
// dst[i] = src[i] * scalar; scalar holds one value of dtype.
void scaleKernel(void* dst, const void* src, size_t count, xdevDataType_t dtype,
                 const void* scalar);
// dst[i] /= divisor.
void divideKernel(void* dst, size_t count, xdevDataType_t dtype, int64_t divisor);

}  // namespace xdev
