// Launchers of the CUDA device's kernels (kernels.cu). Host code includes this header only:
// it needs the CUDA runtime's types, not nvcc. Every launcher enqueues on `stream` and
// returns the launch status; the caller synchronizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "xccl.h"

namespace xccl {
namespace cuda {

// dst[i] = a[i] (op) b[i]. op: Sum Prod Max Min Band Bor Bxor (no Avg/PremulSum: built from
// Sum, scale and divide above this layer); bitwise ops only for integer types; bool is one
// byte 0/1 (sum/max = or, prod/min = and). 16-bit floats are computed in float and rounded
// once. Pointers are device pointers (or host memory mapped for the device).
cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count,
                         xcclDataType_t dtype, xcclRedOp_t op, cudaStream_t stream);
// dst[i] = src[i] * scalar; `scalar` is a host value of dtype (read before the launch).
cudaError_t launchScale(void* dst, const void* src, size_t count, xcclDataType_t dtype,
                        const void* scalar, cudaStream_t stream);
// dst[i] /= divisor (integer division for integer types).
cudaError_t launchDivide(void* dst, size_t count, xcclDataType_t dtype, int64_t divisor,
                         cudaStream_t stream);
// One thread that spins until *flag != 0: the stream-side hold where stream memory
// operations (cuStreamWaitValue32) are unavailable. `flag` is mapped pinned host memory.
// trapOnFail: a flag of 2 (a failed collective) then faults the context (__trap).
cudaError_t launchWaitFlag(const volatile uint32_t* flag, bool trapOnFail, cudaStream_t stream);
// One thread that faults the context (__trap) when *flag == 2: queued behind a
// cuStreamWaitValue32 hold, it keeps a failed collective's outputs from being consumed.
cudaError_t launchCheckFlag(const volatile uint32_t* flag, cudaStream_t stream);
// Loads every kernel above into the current device's context now. Under CUDA's lazy loading
// (the default since 12.2) a kernel's first launch loads it, and that load waits for the
// context's streams: with a caller's stream held until this very collective completes, the
// progress thread's first reduce launch never returned (an H200, 2026-11-26: every
// collective that moved data hung). Called once per device before any hold exists.
cudaError_t preloadKernels();

}  // namespace cuda
}  // namespace xccl
