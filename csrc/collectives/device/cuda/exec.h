// The executor: one kernel per collective, queued on the caller's stream where the collective
// is enqueued, that carries out the collective's device steps (copies, reductions, scaling)
// as the progress thread posts them, then lets the stream go on.
//
// Why: with the steps issued as CUDA calls from the progress thread (cudaMemcpyAsync, a
// kernel launch, a synchronize per step) while the caller's stream is held, a call of the
// application that waits for the whole context can deadlock the process. On an H100
// (2026-11-27) torch's first use of a runtime-compiled kernel (jiterator: a module load)
// while an all_reduce was pending stopped both ranks. The executor needs no CUDA call from
// the host once it runs: the host writes a command into mapped host memory and spins on a
// word the kernel writes back, with no launch and synchronize per step.
//
// What the H100 said (docs/CUDA.md): correct (every conformance check, every dtype and op
// with 2 and 3 ranks), but with two processes on one GPU slower than the memop hold (8 B in
// 2.3 ms instead of 0.9; the GPU time-slices the two contexts, and each spins), and the
// module-load hang remained. Opt-in (XCCL_CUDA_HOLD=exec) until a GPU per rank is measured
// and the hang is understood.
//
// Shared between host and device code: plain types only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace xccl {
namespace cuda {

enum ExecKind : uint32_t { kExecCopy = 1, kExecReduce = 2, kExecScale = 3, kExecDivide = 4 };

// One step. Addresses are as the GPU sees them (registered host memory through its device
// view). copy: `count` bytes a -> dst; reduce: dst = a (op) b over `count` elements; scale:
// dst = a * scalar (scalar: the value's bytes, of dtype); divide: dst /= divisor.
struct ExecCommand {
  uint32_t kind;
  uint32_t dtype;  // xcclDataType_t
  uint32_t op;     // xcclRedOp_t
  uint32_t pad;
  uint64_t count;
  uint64_t dst, a, b;
  uint64_t scalar;  // scale: the scalar's bytes; divide: the divisor (int64)
};

// Mapped pinned host memory, one per hold; the host resets it before each launch.
struct ExecMailbox {
  uint32_t started;    // GPU: 1 once the kernel runs (the stream reached the collective)
  uint32_t stop;       // host: 1 the collective is done, 2 it failed (trap when asked)
  uint32_t posted;     // host: commands posted (1, 2, ...; one in flight at a time)
  uint32_t completed;  // GPU: commands completed; `posted` advances only after it does
  ExecCommand cmd;     // the posted command
};

// Queues the executor on `stream`: `blocks` blocks of kExecThreads threads. `mailbox` is the
// mailbox's device view; `arrive` one zeroed word of device memory (blocks count themselves
// done with each command there). trapOnFail: a stop of 2 faults the context (__trap).
constexpr unsigned kExecThreads = 512;
cudaError_t launchExec(ExecMailbox* mailbox, unsigned* arrive, bool trapOnFail, unsigned blocks,
                       cudaStream_t stream);
cudaError_t preloadExec();  // loads the executor now (see preloadKernels)

}  // namespace cuda
}  // namespace xccl
