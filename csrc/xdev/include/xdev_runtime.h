/*
 * xdev_runtime.h — the runtime of "xdev", the host-memory simulated accelerator.
 *
 * It plays the role that cuda_runtime_api.h plays for NVIDIA GPUs and cnrt.h for Cambricon
 * MLUs, and mirrors the CUDA runtime call for call (docs/XDEV.md has the table), so that a
 * vendor maps it onto CUDA or CNRT one function at a time. No torch, no C++ in the interface.
 *
 * The simulated device memory IS host memory: a pointer from xdevMalloc can be read by CPU
 * code, but the runtime accounts it per device against a capacity and tracks it in a
 * registry (xdevPointerGetAttributes). Streams are real ordered queues, each executed by its
 * own worker thread; events mark positions in a stream.
 *
 * Every call returns an xdevError_t and never throws or aborts. A failing call also records
 * its code as the calling thread's last error (xdevGetLastError) and a message describing it
 * (xdevGetLastErrorMessage). xdevErrorNotReady from a query is not recorded, as in CUDA.
 */
#ifndef XDEV_RUNTIME_H_
#define XDEV_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define XDEV_API __declspec(dllexport)
#else
#define XDEV_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  xdevSuccess = 0,
  xdevErrorInvalidValue = 1,
  xdevErrorMemoryAllocation = 2,
  xdevErrorInvalidDevice = 3,
  xdevErrorInvalidResourceHandle = 4,
  xdevErrorNotReady = 5,
  xdevErrorInvalidDevicePointer = 6,
  xdevErrorLaunchFailure = 7,
  xdevErrorInternal = 8,
  /* Addition: work this stream waited for failed (a collective whose peer died, timed out or
   * was aborted, released with xdevHoldFail), or the stream waited on one that had. Sticky,
   * like a device fault in CUDA: from the failed position on, synchronising, querying,
   * recording-then-waiting and launching on the stream return it, with the failure's message
   * (xdevGetLastErrorMessage), until xdevDeviceClearErrors. */
  xdevErrorStreamFailed = 9
} xdevError_t;

typedef struct xdevStream_st* xdevStream_t; /* NULL = the current device's default stream */
typedef struct xdevEvent_st* xdevEvent_t;

typedef enum {
  xdevMemcpyHostToHost = 0,
  xdevMemcpyHostToDevice = 1,
  xdevMemcpyDeviceToHost = 2,
  xdevMemcpyDeviceToDevice = 3,
  xdevMemcpyDefault = 4 /* direction inferred from the pointers */
} xdevMemcpyKind;

typedef enum {
  xdevMemoryTypeUnregistered = 0,
  xdevMemoryTypeHost = 1, /* from xdevHostAlloc */
  xdevMemoryTypeDevice = 2
} xdevMemoryType;

/* base/size: the whole allocation holding the pointer (it may point inside it). For
 * unregistered memory: device -1, base NULL, size 0. */
typedef struct {
  xdevMemoryType type;
  int device;
  void* base;
  size_t size;
} xdevPointerAttributes;

#define xdevEventDefault 0x0
#define xdevEventBlockingSync 0x1 /* accepted; waits always block */
#define xdevEventDisableTiming 0x2

#define xdevStreamDefault 0x0
#define xdevStreamNonBlocking 0x1 /* accepted; no stream synchronises implicitly anyway */

typedef void (*xdevHostFn_t)(void* userData);

/* Element types and reduction ops of the kernels. The values equal xcclDataType_t and
 * xcclRedOp_t in xccl.h, so the collectives pass theirs through unchanged. */
typedef enum {
  xdevInt8 = 0,
  xdevUint8 = 1,
  xdevInt32 = 2,
  xdevInt64 = 3,
  xdevFloat16 = 4,
  xdevFloat32 = 5,
  xdevFloat64 = 6,
  xdevBfloat16 = 7,
  xdevBool = 8,
  xdevFloat8e4m3 = 9,  /* OCP FP8 e4m3fn */
  xdevFloat8e5m2 = 10, /* OCP FP8 e5m2 */
  xdevUint16 = 11,
  xdevUint32 = 12,
  xdevUint64 = 13,
  xdevNumTypes = 14
} xdevDataType_t;

typedef enum {
  xdevSum = 0,
  xdevProd = 1,
  xdevMax = 2,
  xdevMin = 3,
  xdevAvg = 4,       /* not an element-wise kernel: Sum then xdevDivideAsync */
  xdevPremulSum = 5, /* not an element-wise kernel: xdevScaleAsync then Sum */
  xdevBand = 6,      /* integer and bool types only */
  xdevBor = 7,
  xdevBxor = 8,
  xdevNumOps = 9
} xdevRedOp_t;

/* ---- errors ---- */
XDEV_API const char* xdevGetErrorString(xdevError_t error);
XDEV_API const char* xdevGetErrorName(xdevError_t error);
XDEV_API xdevError_t xdevGetLastError(void); /* returns and clears this thread's last error */
XDEV_API xdevError_t xdevPeekAtLastError(void);
/* Addition: what the last failing call on this thread said ("" when none). Valid until this
 * thread's next failing call. Not cleared by xdevGetLastError. */
XDEV_API const char* xdevGetLastErrorMessage(void);

/* ---- devices ---- */
XDEV_API xdevError_t xdevGetDeviceCount(int* count); /* XCCL_XDEV_COUNT, default 8 */
XDEV_API xdevError_t xdevSetDevice(int device);      /* thread-local current device */
XDEV_API xdevError_t xdevGetDevice(int* device);     /* 0 until the thread sets one */
XDEV_API xdevError_t xdevDeviceSynchronize(void);    /* all streams of the current device */
/* Addition: forgets the sticky errors of the current device's streams (launch failures and
 * failed holds): work queued from now on runs again. What a program calls after it has dealt
 * with a failed collective (destroyed or rebuilt the group); CUDA needs a context reset. */
XDEV_API xdevError_t xdevDeviceClearErrors(void);
/* Addition, like cudaDeviceGetStreamPriorityRange: priorities are accepted and kept, but do
 * not change scheduling (each stream has its own worker). */
XDEV_API xdevError_t xdevDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority);

/* ---- memory ---- */
XDEV_API xdevError_t xdevMemGetInfo(size_t* freeBytes, size_t* totalBytes); /* current device */
/* Current device; 256-byte aligned; bytes == 0 gives NULL. Beyond the device's capacity
 * (XCCL_XDEV_MEMORY): xdevErrorMemoryAllocation, nothing else changes. */
XDEV_API xdevError_t xdevMalloc(void** ptr, size_t bytes);
/* Waits for the work already queued on every stream (it may still use ptr), like cudaFree.
 * NULL is a no-op; an unknown pointer gives xdevErrorInvalidDevicePointer. */
XDEV_API xdevError_t xdevFree(void* ptr);
/* "Pinned" host memory: registered so attributes report Host; not counted as device memory. */
XDEV_API xdevError_t xdevHostAlloc(void** ptr, size_t bytes);
XDEV_API xdevError_t xdevFreeHost(void* ptr);
XDEV_API xdevError_t xdevPointerGetAttributes(xdevPointerAttributes* attr, const void* ptr);

/* ---- inter-process memory, as cudaIpcGetMemHandle / cudaIpcOpenMemHandle ----
 * Device memory lives in shareable segments: another process of this host maps a buffer and
 * reads or writes it in place (libxccl's single-copy transfers between the ranks of a host).
 * A handle names the device byte at devPtr and the rest of its allocation (devPtr may point
 * inside an allocation: an addition to CUDA, which wants its base); it stays valid while the
 * allocation lives. Opening maps the owner's segment once per process (later opens are a
 * lookup) and returns the byte's address here; a handle of this very process gives devPtr
 * back. A handle of a process that exited fails with xdevErrorInvalidResourceHandle, a
 * malformed one with xdevErrorInvalidValue. Closing is a no-op kept for the CUDA call shape:
 * mappings stay until the process exits. */
#define XDEV_IPC_HANDLE_SIZE 64
typedef struct {
  char reserved[XDEV_IPC_HANDLE_SIZE];
} xdevIpcMemHandle_t;
XDEV_API xdevError_t xdevIpcGetMemHandle(xdevIpcMemHandle_t* handle, void* devPtr);
XDEV_API xdevError_t xdevIpcOpenMemHandle(void** devPtr, xdevIpcMemHandle_t handle,
                                          unsigned int flags);
/* Bytes of the allocation from the handle's byte on (what an opener may touch). */
XDEV_API xdevError_t xdevIpcMemHandleGetSize(const xdevIpcMemHandle_t* handle, size_t* bytes);
XDEV_API xdevError_t xdevIpcCloseMemHandle(void* devPtr);

/* ---- copies and memset ----
 * A device side must lie wholly inside one xdevMalloc allocation and a host side must not be
 * device memory, else xdevErrorInvalidValue. xdevMemcpy runs on the current device's default
 * stream and returns when the copy is done. */
XDEV_API xdevError_t xdevMemcpy(void* dst, const void* src, size_t bytes, xdevMemcpyKind kind);
XDEV_API xdevError_t xdevMemcpyAsync(void* dst, const void* src, size_t bytes, xdevMemcpyKind kind,
                                     xdevStream_t stream);
XDEV_API xdevError_t xdevMemsetAsync(void* dst, int value, size_t bytes, xdevStream_t stream);

/* ---- streams ----
 * A stream belongs to the device current when it is created. Work on one stream runs in issue
 * order on the stream's worker thread (started at the first enqueue). The default stream
 * (NULL) is one ordinary stream per device: it does NOT synchronise implicitly with other
 * streams (CUDA's per-thread default stream behaviour). */
XDEV_API xdevError_t xdevStreamCreate(xdevStream_t* stream);
XDEV_API xdevError_t xdevStreamCreateWithFlags(xdevStream_t* stream, unsigned flags); /* addition */
XDEV_API xdevError_t xdevStreamCreateWithPriority(xdevStream_t* stream, unsigned flags,
                                                  int priority);
XDEV_API xdevError_t xdevStreamDestroy(xdevStream_t stream); /* drains queued work first */
/* xdevSuccess when all queued work is done, xdevErrorNotReady otherwise; a stream whose host
 * function threw returns xdevErrorLaunchFailure from then on (sticky), one that passed a
 * failed hold xdevErrorStreamFailed (sticky). */
XDEV_API xdevError_t xdevStreamQuery(xdevStream_t stream);
XDEV_API xdevError_t xdevStreamSynchronize(xdevStream_t stream);
/* Work queued on `stream` after this call waits until the work `event` captured (its latest
 * record before this call) is done. flags must be 0. A never-recorded event: no wait. */
XDEV_API xdevError_t xdevStreamWaitEvent(xdevStream_t stream, xdevEvent_t event, unsigned flags);
XDEV_API xdevError_t xdevStreamGetDevice(xdevStream_t stream, int* device);
/* Unique in the process and never reused: > 0 for created streams, 0 for default streams. */
XDEV_API xdevError_t xdevStreamGetId(xdevStream_t stream, unsigned long long* id);
XDEV_API xdevError_t xdevStreamGetPriority(xdevStream_t stream, int* priority); /* addition */
/* The generic "kernel launch": fn(userData) runs on the stream's worker, in order. It must not
 * synchronise the stream it runs on. If it throws (C++), the stream records
 * xdevErrorLaunchFailure; later work on the stream still runs. */
XDEV_API xdevError_t xdevLaunchHostFunc(xdevStream_t stream, xdevHostFn_t fn, void* userData);
/* Holds (addition; CUDA expresses the same with cuStreamWaitValue32 on a flag the host
 * writes): work queued on `stream` after xdevStreamHold waits until xdevHoldRelease(hold) is
 * called, from any thread, exactly once (it frees the hold). A hold occupies no worker
 * thread: the releasing thread advances the stream itself when nothing runs before it, so a
 * host waiting on the stream wakes straight from the releaser. The collectives use one per
 * operation: the stream's view of "the collective is done". */
typedef struct xdevHold_st* xdevHold_t;
XDEV_API xdevError_t xdevStreamHold(xdevStream_t stream, xdevHold_t* hold);
XDEV_API xdevError_t xdevHoldRelease(xdevHold_t hold);
/* Releases the hold as failed (exactly once, instead of xdevHoldRelease; frees it): the
 * stream fails at the hold's position with xdevErrorStreamFailed and the message `why`, so
 * nothing that consumes the held operation's output can observe it as a result: work queued
 * behind the hold is not run, and every later synchronisation of the stream, or of a stream
 * or event that waits on it, reports the failure. Work before the hold is unaffected. */
XDEV_API xdevError_t xdevHoldFail(xdevHold_t hold, const char* why);

/* Named holds (addition): `name` (copied; NULL or "" for none) labels the held span in the
 * activity records below, e.g. "xccl allreduce". */
XDEV_API xdevError_t xdevStreamHoldNamed(xdevStream_t stream, xdevHold_t* hold, const char* name);

/* ---- activity records (addition; what CUPTI's activity API is to CUDA) ----
 * While enabled, every kernel, copy, memset and host function a stream runs, and every hold
 * the stream waited at, is recorded with its start and end (nanoseconds since the Unix
 * epoch, the clock torch's profiler uses), device, stream and the external id the enqueuing
 * thread had pushed (0: none). Records wait in a buffer of XDEV_ACTIVITY_CAPACITY (default
 * 1,000,000) until read; past that they are counted as dropped. Used by torch_xccl's Kineto
 * plugin, so xdev work appears in torch.profiler traces. */
typedef enum {
  xdevActivityKernel = 1,
  xdevActivityMemcpy = 2,
  xdevActivityMemset = 3,
  xdevActivityHostFunction = 4,
  xdevActivityHold = 5
} xdevActivityKind;
typedef struct {
  char name[64];
  int kind; /* xdevActivityKind */
  int device;
  unsigned long long stream;     /* xdevStreamGetId's number */
  long long startNs, endNs;      /* Unix epoch, ns */
  unsigned long long externalId; /* xdevActivityPushExternalId's, at enqueue (0: none) */
  unsigned long long bytes;      /* copies and memsets */
} xdevActivityRecord;
XDEV_API xdevError_t xdevActivityEnable(int enable); /* 1: record from now; 0: stop */
/* The calling thread's id for what it enqueues next (a stack: push / pop). */
XDEV_API xdevError_t xdevActivityPushExternalId(unsigned long long id);
XDEV_API xdevError_t xdevActivityPopExternalId(void);
/* Moves up to `capacity` records, oldest first, into out; *count gets how many; *dropped
 * (may be NULL) how many were lost to a full buffer since the last read. */
XDEV_API xdevError_t xdevActivityRead(xdevActivityRecord* out, size_t capacity, size_t* count,
                                      unsigned long long* dropped);

/* ---- events ----
 * An event belongs to the device current when it is created; it marks "all work queued on
 * the stream so far". Re-recording is allowed: queries, waits and elapsed times use the latest
 * record, and waits queued earlier keep the record they captured. */
XDEV_API xdevError_t xdevEventCreate(xdevEvent_t* event);
XDEV_API xdevError_t xdevEventCreateWithFlags(xdevEvent_t* event, unsigned flags);
XDEV_API xdevError_t xdevEventDestroy(xdevEvent_t event);
/* A stream of another device than the event's: xdevErrorInvalidResourceHandle. */
XDEV_API xdevError_t xdevEventRecord(xdevEvent_t event, xdevStream_t stream);
XDEV_API xdevError_t xdevEventQuery(xdevEvent_t event); /* never recorded: xdevSuccess */
XDEV_API xdevError_t xdevEventSynchronize(xdevEvent_t event);
/* Milliseconds between two completed records of timing events (not xdevEventDisableTiming).
 * Not yet complete: xdevErrorNotReady; never recorded or timing disabled:
 * xdevErrorInvalidResourceHandle. */
XDEV_API xdevError_t xdevEventElapsedTime(float* ms, xdevEvent_t start, xdevEvent_t end);

/* ---- kernels ----
 * Queued on a stream like a launch. Arguments (dtype, op, pointers) are checked at the call.
 * Operands may be device memory or host memory the caller keeps alive until the kernel ran. */
/* dst[i] = a[i] op b[i]; dst may equal a or b. Sum Prod Max Min for every type, Band Bor Bxor
 * for integer and bool types. 16-bit floats are computed in float32 and rounded once. */
XDEV_API xdevError_t xdevReduceAsync(void* dst, const void* a, const void* b, size_t count,
                                     xdevDataType_t dtype, xdevRedOp_t op, xdevStream_t stream);
/* dst[i] = src[i] * scalar; hostScalar points to one value of dtype, read at the call. Not
 * defined for bool. */
XDEV_API xdevError_t xdevScaleAsync(void* dst, const void* src, size_t count, xdevDataType_t dtype,
                                    const void* hostScalar, xdevStream_t stream);
/* dst[i] /= divisor (integer division for integer types); divisor != 0. Not for bool. */
XDEV_API xdevError_t xdevDivideAsync(void* dst, size_t count, xdevDataType_t dtype, int64_t divisor,
                                     xdevStream_t stream);
/* Additions: the same kernels run at once on the calling thread, for callers whose own
 * ordering already makes the operands ready (the collectives' progress thread). */
XDEV_API xdevError_t xdevReduce(void* dst, const void* a, const void* b, size_t count,
                                xdevDataType_t dtype, xdevRedOp_t op);
XDEV_API xdevError_t xdevScale(void* dst, const void* src, size_t count, xdevDataType_t dtype,
                               const void* hostScalar);
/* dsts[k][i] = ((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ... for every k < ndst, nsrc >= 1,
 * ndst >= 1, ops as xdevReduce: one pass over the sources, each block of the result stored to
 * every destination while its sources are in the cache. A destination may be a source. */
XDEV_API xdevError_t xdevReduceCopy(void* const* dsts, int ndst, const void* const* srcs, int nsrc,
                                    size_t count, xdevDataType_t dtype, xdevRedOp_t op);
XDEV_API xdevError_t xdevDivide(void* dst, size_t count, xdevDataType_t dtype, int64_t divisor);

#ifdef __cplusplus
}
#endif

#endif /* XDEV_RUNTIME_H_ */
