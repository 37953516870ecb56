/*
 * xccl.h — public C API of libxccl, the XCCL collective-communication core.
 *
 * Shaped like nccl.h / cncl.h: a communicator is created once per rank from a
 * unique id (or from a key-value store), collectives are enqueued on it and
 * progressed by the library off the caller's thread, in order. Every call
 * returns an xcclResult_t; nothing throws across this boundary.
 *
 * Completion: every enqueued operation gets the communicator's next sequence
 * number. xcclEventRecord() captures "everything enqueued so far";
 * xcclEventQuery()/xcclEventWait() test or wait for it. Operations complete in
 * the order they were enqueued.
 */
#ifndef XCCL_H_
#define XCCL_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define XCCL_API __declspec(dllexport)
#else
#define XCCL_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define XCCL_MAJOR 0
#define XCCL_MINOR 1
#define XCCL_PATCH 0
#define XCCL_VERSION_CODE (XCCL_MAJOR * 10000 + XCCL_MINOR * 100 + XCCL_PATCH)

typedef enum {
  xcclSuccess = 0,
  xcclUnhandledError = 1,  /* internal bug or unexpected system failure */
  xcclSystemError = 2,     /* a system call failed (socket, mmap, ...) */
  xcclInternalError = 3,   /* invariant broken inside the library */
  xcclInvalidArgument = 4, /* a bad pointer, count, rank, dtype or op */
  xcclInvalidUsage = 5,    /* a call that is not allowed in this state */
  xcclRemoteError = 6,     /* a peer failed, died, closed or sent bad data */
  xcclInProgress = 7,      /* not complete yet (query calls) */
  xcclTimeout = 8,         /* a wait exceeded its deadline */
  xcclNumResults = 9
} xcclResult_t;

typedef enum {
  xcclInt8 = 0,
  xcclUint8 = 1,
  xcclInt32 = 2,
  xcclInt64 = 3,
  xcclFloat16 = 4,
  xcclFloat32 = 5,
  xcclFloat64 = 6,
  xcclBfloat16 = 7,
  xcclBool = 8,
  xcclFloat8e4m3 = 9,  /* OCP FP8 e4m3fn (torch.float8_e4m3fn): each step computed in float and
                          rounded once, as torch converts: saturating at +-448 */
  xcclFloat8e5m2 = 10, /* OCP FP8 e5m2 (torch.float8_e5m2): overflow is infinity */
  xcclUint16 = 11,
  xcclUint32 = 12,
  xcclUint64 = 13,
  xcclNumTypes = 14,
  /* Not a type: widens the enum's range to int so that an out-of-range value a caller
   * passes is a checked xcclInvalidArgument, not undefined behaviour in C++ (as NCCL). */
  xcclMaxDataType = 0x7fffffff
} xcclDataType_t;

typedef enum {
  xcclSum = 0,
  xcclProd = 1,
  xcclMax = 2,
  xcclMin = 3,
  xcclAvg = 4,
  xcclPremulSum = 5, /* each rank's input is multiplied by a scalar, then summed */
  xcclBand = 6,      /* integer and bool types only */
  xcclBor = 7,
  xcclBxor = 8,
  xcclNumOps = 9,
  xcclMaxRedOp = 0x7fffffff /* not an op: widens the range to int (see xcclMaxDataType) */
} xcclRedOp_t;

/* Opaque id that ranks share to find each other: the address of a small
 * rendezvous server started by xcclGetUniqueId plus a per-communicator secret. */
#define XCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[XCCL_UNIQUE_ID_BYTES];
} xcclUniqueId;

typedef struct xcclComm* xcclComm_t;

/* A device stream the buffers are ordered on (cudaStream_t for the CUDA
 * device). NULL means "the device's default ordering"; the host device
 * ignores it. */
typedef void* xcclStream_t;

/* The calling thread as the stream, for host communicators (xcclDeviceHost): an operation
 * given XCCL_STREAM_CALLER runs on the thread that calls it, after every operation enqueued
 * on the communicator before it, and the call returns once it is complete, with its outcome
 * (an error of the operation is the call's result). It saves the hand-off to the progress
 * thread and back, which is most of the time of a small operation: use it where the caller
 * would wait for the operation at once (torch's blocking collectives do). Inside a group it
 * applies at xcclGroupEnd, for a group on one communicator only. */
#define XCCL_STREAM_CALLER ((xcclStream_t)(~(uintptr_t)0)) /* never a stream handle */

/* Completion marker: all operations enqueued on `comm` up to `seq`. recordedNs: when it was
 * recorded (steady clock), for xcclEventElapsedTime. */
typedef struct {
  xcclComm_t comm;
  uint64_t seq;
  int64_t recordedNs;
} xcclEvent_t;

/* Key-value store used for rendezvous instead of a unique id (the torch
 * plugin backs it with c10d's Store). Both callbacks return 0 on success.
 * get() blocks until the key exists or timeout_ms passes (timeout_ms < 0: no
 * limit); it writes at most `cap` bytes and stores the value's full length in
 * *len. get() returns 1 when timeout_ms passed without the key (libxccl waits in
 * short slices and asks again) and any other non-zero value when the store
 * itself failed (unreachable: its host process gone), which fails the caller at
 * once instead of at the deadline. */
typedef struct {
  void* ctx;
  int (*set)(void* ctx, const char* key, const void* value, size_t len);
  int (*get)(void* ctx, const char* key, void* value, size_t cap, size_t* len, int64_t timeout_ms);
} xcclStore_t;

/* The kind of device a communicator's buffers and streams belong to. */
typedef enum {
  xcclDeviceDefault = 0, /* XCCL_DEVICE (default "host") */
  xcclDeviceHost = 1,    /* host memory, no streams: stream arguments must be NULL */
  xcclDeviceXdev = 2,    /* the simulated accelerator: operations are ordered on xdev streams
                            (xdevStream_t; NULL = the communicator's device's default stream) */
  xcclDeviceCuda = 3,    /* CUDA (builds with XCCL_WITH_CUDA): buffers in CUDA device memory,
                            operations ordered on cudaStream_t streams, as NCCL */
  xcclMaxDeviceType = 0x7fffffff /* not a kind: widens the range to int (see xcclMaxDataType) */
} xcclDeviceType_t;

/* What a failed operation does to the device stream it was ordered on (xdev, CUDA). */
typedef enum {
  /* The stream fails: every later operation on it fails too, until the device's errors are
     cleared (xdev: xdevClearErrors), so no kernel ever reads a failed operation's outputs as
     results. The default. */
  xcclStreamErrorsFail = 0,
  /* The stream goes on, as with NCCL: the failed operation's outputs are undefined and the
     failure is reported by the operation's event and xcclCommGetAsyncError only. For callers
     that discard the whole step on any error (torchft's process groups). */
  xcclStreamErrorsReport = 1,
  xcclMaxStreamErrors = 0x7fffffff /* not a mode: widens the range to int */
} xcclStreamErrors_t;

/* Optional settings for communicator creation: start from XCCL_CONFIG_INITIALIZER (as
 * NCCL_CONFIG_INITIALIZER) or zero-initialise, then set fields by name. The initializer
 * fills the first three fields (the struct's size, a magic number and the header's version),
 * so the library reads a field only when the caller's struct holds it: a program built
 * against an older header keeps working, and a zero-initialised config means every default
 * (its size and magic are 0). */
typedef struct {
  size_t size;                 /* sizeof(xcclConfig_t) of the caller's header; 0 if zeroed */
  unsigned int magic;          /* XCCL_CONFIG_MAGIC (the initializer's); 0 if zeroed */
  unsigned int version;        /* XCCL_VERSION_CODE of the caller's header */
  int64_t timeout_ms;          /* per-operation deadline; 0 = XCCL_TIMEOUT_MS (default 30 min) */
  int device;                  /* device ordinal the buffers live on; -1 = current/default */
  const char* name;            /* tag used in logs (e.g. the process-group name); may be NULL */
  xcclDeviceType_t deviceType; /* xcclDeviceDefault when zero-initialised */
  xcclStreamErrors_t streamErrors; /* xcclStreamErrorsFail when zero-initialised */
  /* Non-blocking creation, as NCCL's `blocking`: 0 = xcclCommInitRankConfig and
   * xcclCommInitRankStore return xcclInProgress at once with *comm set, and the communicator
   * is made in the background; poll xcclCommGetAsyncError(comm) until it is not
   * xcclInProgress (xcclSuccess: ready; otherwise the creation's error, its text from
   * xcclGetLastError(comm)). Until then the only calls comm takes are
   * xcclCommGetAsyncError, xcclGetLastError, xcclCommAbort and xcclCommDestroy (both stop the
   * creation within a fraction of a second); any other is xcclInvalidUsage. 1 = creation
   * returns when done. XCCL_CONFIG_UNDEF_INT (the initializer's), or a zero-initialised or
   * NULL config: XCCL_COMM_BLOCKING (default 1). Operations, splits, shrinks, grows and
   * xcclCommInitAll are blocking whatever the setting. */
  int blocking;
  /* 1: every reduction (allreduce, reduce, reducescatter(v)) returns, bit for bit, the left
   * fold of the inputs in rank order, ((in0 op in1) op in2) ..., whatever the size, the
   * algorithm, the transports or the hosts the ranks live on (docs/ALGORITHMS.md,
   * "Determinism"); 0: the fastest algorithm (every rank still gets the same bits).
   * XCCL_CONFIG_UNDEF_INT (the initializer's), or a zero-initialised or NULL config:
   * XCCL_REPRODUCIBLE. Children (split, shrink, grow) made with a NULL config keep the
   * parent's. */
  int reproducible;
} xcclConfig_t;
#define XCCL_CONFIG_UNDEF_INT INT_MIN
#define XCCL_CONFIG_MAGIC 0x78636366u
#define XCCL_CONFIG_INITIALIZER                                                                 \
  {                                                                                             \
    sizeof(xcclConfig_t), XCCL_CONFIG_MAGIC, XCCL_VERSION_CODE, 0, -1, NULL, xcclDeviceDefault, \
        xcclStreamErrorsFail, XCCL_CONFIG_UNDEF_INT, XCCL_CONFIG_UNDEF_INT                      \
  }
/* Whether `cfg` (non-NULL) holds `field` with a value its caller set: made by the initializer
 * of a header that has the field. For the library and for wrappers. */
#define XCCL_CONFIG_HAS(cfg, field)     \
  ((cfg)->magic == XCCL_CONFIG_MAGIC && \
   (cfg)->size >= offsetof(xcclConfig_t, field) + sizeof(((xcclConfig_t*)0)->field))

/* ---- version, errors ---- */
XCCL_API xcclResult_t xcclGetVersion(int* version);
XCCL_API const char* xcclGetErrorString(xcclResult_t result);
/* Human-readable detail of the last error raised on this thread (or in
 * comm's progress thread when comm != NULL): rank, op, peer, reason. */
XCCL_API const char* xcclGetLastError(xcclComm_t comm);

/* ---- communicator life cycle ---- */
XCCL_API xcclResult_t xcclGetUniqueId(xcclUniqueId* uniqueId);
XCCL_API xcclResult_t xcclCommInitRank(xcclComm_t* comm, int nranks, xcclUniqueId commId, int rank);
XCCL_API xcclResult_t xcclCommInitRankConfig(xcclComm_t* comm, int nranks, xcclUniqueId commId,
                                             int rank, const xcclConfig_t* config);
/* Rendezvous through a store: every rank passes the same prefix (unique per
 * communicator, e.g. "pg0/"). The store may still hold an earlier initialisation's records
 * under that prefix: the other ranks wait past a secret record written by a process of their
 * host that has exited, or that this process already used, and read nothing else that an
 * earlier initialisation wrote. A writer on another host cannot be checked: when a store
 * outlives its processes across hosts, use a fresh prefix per initialisation. */
XCCL_API xcclResult_t xcclCommInitRankStore(xcclComm_t* comm, int nranks, int rank,
                                            const xcclStore_t* store, const char* prefix,
                                            const xcclConfig_t* config);
/* One process drives ndev ranks, like ncclCommInitAll: comms[i] is rank i of a new
 * ndev-rank communicator on device devlist[i] (devlist NULL: device i). The ranks
 * rendezvous in memory; every communicator has its own progress thread. On failure no
 * communicator is left behind. */
XCCL_API xcclResult_t xcclCommInitAll(xcclComm_t* comms, int ndev, const int* devlist);
/* The same with a configuration for every rank (its `device` is replaced by devlist[i]),
 * e.g. deviceType = xcclDeviceXdev. config NULL: as xcclCommInitAll. */
XCCL_API xcclResult_t xcclCommInitAllConfig(xcclComm_t* comms, int ndev, const int* devlist,
                                            const xcclConfig_t* config);
/* Waits for enqueued work (up to the comm's timeout), then frees everything. */
XCCL_API xcclResult_t xcclCommDestroy(xcclComm_t comm);
/* Stops at once: pending operations fail, peers see the closure (and fail fast instead
 * of waiting for their timeout), and the communicator is freed, like ncclCommAbort: the
 * handle must not be used afterwards, so callers that share it across threads must
 * serialise the abort with their other uses. */
XCCL_API xcclResult_t xcclCommAbort(xcclComm_t comm);
/* The first half of xcclCommAbort without the free: every pending and later operation
 * fails at once (a caller blocked in one, XCCL_STREAM_CALLER included, returns) and peers
 * see the closure. Safe from any thread while other threads use comm; idempotent. The
 * communicator must still be freed with xcclCommAbort or xcclCommDestroy. */
XCCL_API xcclResult_t xcclCommInterrupt(xcclComm_t comm);
/* ---- communicators made from communicators (survivors continue) ----
 * None of these use the store or unique id the parent was made with: every process runs a
 * small bootstrap service whose address the parent's members exchanged at creation, and a
 * child's members meet on the service of the child's rank 0. They work on a failed parent
 * (a dead, stopped or cut-off peer). The child is a new communicator with its own
 * connections, timeout and configuration; the parent stays valid until it is destroyed
 * or aborted (do that after making the children). */
#define XCCL_SPLIT_NOCOLOR (-1)
/* Collective over comm (every rank calls it, in the same order as its other splits and
 * shrinks): the ranks that pass the same color >= 0 form *newcomm, ranked by key (ties by
 * their rank in comm). color XCCL_SPLIT_NOCOLOR: the rank takes part and gets NULL.
 * config NULL: the parent's (device kind, device, timeout). Needs comm's rank 0 alive.
 * A member whose process is gone before it takes part fails the others' call at once with
 * xcclRemoteError naming it; one that does not answer (stopped, cut off) after
 * XCCL_HEARTBEAT_TIMEOUT_MS. The same holds for xcclCommShrink and xcclCommGrow's members. */
XCCL_API xcclResult_t xcclCommSplit(xcclComm_t comm, int color, int key, xcclComm_t* newcomm,
                                    const xcclConfig_t* config);
#define XCCL_SHRINK_DEFAULT 0x00 /* wait for comm's pending operations (up to its timeout) */
#define XCCL_SHRINK_ABORT 0x01   /* fail comm's pending operations first (after a fault) */
/* The ranks of comm not in excludeRanks[0..excludeCount) form *newcomm, in comm's rank
 * order. Only those ranks call it, each with the same list (in any order); the excluded ranks
 * may be dead, stopped or cut off. An empty list, a rank out of range or repeated, this rank
 * itself, or every rank: xcclInvalidArgument. A rank that passes a different list never
 * meets the others: its call fails at the timeout. config NULL: the parent's. */
XCCL_API xcclResult_t xcclCommShrink(xcclComm_t comm, const int* excludeRanks, int excludeCount,
                                     xcclComm_t* newcomm, const xcclConfig_t* config,
                                     int shrinkFlags);
/* Growing: a communicator of nranks > comm's size whose first ranks are comm's members
 * (same ranks) and whose others are new processes. One existing member makes the id:
 * xcclCommGetUniqueId (served by its own process's bootstrap service; single use) and hands
 * it to the new processes out of band. Then, together:
 *   - every member of comm: xcclCommGrow(comm, nranks, id or NULL, -1, &newcomm, config);
 *     the member that made the id passes it, the others may pass NULL (they read it from
 *     comm's rank 0). comm's pending operations are waited for first (up to its timeout);
 *     comm stays valid. Collective over comm, in the same order as its splits and shrinks.
 *   - every new process: xcclCommGrow(NULL, nranks, &id, rank, &newcomm, config) with a
 *     distinct rank from comm's size to nranks - 1.
 * config NULL: the parent's (members) or the defaults (new processes). A unique id from
 * xcclGetUniqueId, a rank out of range, nranks not above comm's size, or an existing
 * member passing rank >= 0: xcclInvalidArgument. */
XCCL_API xcclResult_t xcclCommGetUniqueId(xcclComm_t comm, xcclUniqueId* uniqueId);
XCCL_API xcclResult_t xcclCommGrow(xcclComm_t comm, int nranks, const xcclUniqueId* uniqueId,
                                   int rank, xcclComm_t* newcomm, const xcclConfig_t* config);
/* Fails every pending and later operation of comm on this rank (as xcclCommInterrupt) and
 * on every peer that can still be reached: each peer's pending or next operation fails with
 * "rank r revoked the communicator". comm can still be split or shrunk; it must still be
 * freed (xcclCommAbort or xcclCommDestroy). */
XCCL_API xcclResult_t xcclCommRevoke(xcclComm_t comm);
/* alive[r] (one int per rank of comm) = 1 if rank r's process answered on its bootstrap
 * service within timeout_ms, else 0 (this rank: 1). A killed process is found at once, a
 * stopped or unreachable one when the time runs out. Works on a failed communicator: the
 * ranks to pass to xcclCommShrink. Processes, not communicators: a rank whose
 * communicator was aborted but whose process lives still answers. */
XCCL_API xcclResult_t xcclCommProbeAlive(xcclComm_t comm, int* alive, int64_t timeout_ms);

/* What a communicator holds on this rank, for capacity planning at scale (also logged at
 * INFO when it is destroyed). Peers of one host connect when an operation first needs them
 * (XCCL_RUNTIME_CONNECT=1, the default): onFirstUse counts those not connected yet. */
typedef struct {
  int peers;          /* the other ranks of comm */
  int shmConnected;   /* peers connected through shared memory */
  int tcpConnected;   /* peers connected through the network: TCP or a network plugin */
  int onFirstUse;     /* peers that will connect when an operation first needs them */
  int64_t shmBytes;   /* shared memory this rank's outgoing rings occupy now */
  int processFds;     /* file descriptors the whole process holds now */
  int processThreads; /* threads of the whole process now */
} xcclCommStats_t;
XCCL_API xcclResult_t xcclCommGetStats(xcclComm_t comm, xcclCommStats_t* stats);

/* What a communicator is, as NCCL's ncclCommQueryProperties: start from
 * XCCL_COMM_PROPERTIES_INITIALIZER (its size, magic and version say which fields the caller's
 * header has; the library fills only those). */
typedef struct {
  size_t size;                 /* sizeof(xcclCommProperties_t) of the caller's header */
  unsigned int magic;          /* XCCL_COMM_PROPERTIES_MAGIC */
  unsigned int version;        /* XCCL_VERSION_CODE of the caller's header */
  int rank;                    /* this rank in the communicator */
  int nRanks;                  /* ranks in the communicator */
  xcclDeviceType_t deviceType; /* xcclDeviceHost, xcclDeviceXdev or xcclDeviceCuda */
  int device;                  /* the device's ordinal on this host (host memory: 0) */
  int localRank;               /* this rank among the ranks of its host (0 = the lowest) */
  int localRanks;              /* ranks of the communicator on this host */
  int nHosts;                  /* hosts the communicator spans */
  int reproducible;            /* 1: reductions are rank-order folds (XCCL_REPRODUCIBLE) */
  int registeredInPlace;       /* 1: buffers from xcclMemAlloc / xcclCommRegister are read in place
                                  by the ranks of the host (0 on CUDA: it moves bytes over IPC lanes) */
  int windows;       /* 1: xcclCommWindowRegister and put/signal work here (host and xdev memory) */
  int64_t timeoutMs; /* the per-operation deadline */
} xcclCommProperties_t;
#define XCCL_COMM_PROPERTIES_MAGIC 0x78637070u
#define XCCL_COMM_PROPERTIES_INITIALIZER                                                \
  {                                                                                     \
    sizeof(xcclCommProperties_t), XCCL_COMM_PROPERTIES_MAGIC, XCCL_VERSION_CODE, -1, 0, \
        xcclDeviceDefault, -1, -1, 0, 0, 0, 0, 0, 0                                     \
  }
/* xcclInvalidArgument for a struct not made by the initializer (its magic), naming it. */
XCCL_API xcclResult_t xcclCommQueryProperties(xcclComm_t comm, xcclCommProperties_t* props);

/* xcclSuccess, or the sticky error that failed the communicator. */
XCCL_API xcclResult_t xcclCommGetAsyncError(xcclComm_t comm, xcclResult_t* asyncError);
XCCL_API xcclResult_t xcclCommCount(const xcclComm_t comm, int* count);
XCCL_API xcclResult_t xcclCommUserRank(const xcclComm_t comm, int* rank);

/* ---- memory peers can map, and registered buffers ---- */
/* size bytes of the default device's memory (XCCL_DEVICE: host memory, or xdev device memory)
 * that the other processes of this host can map, zero-filled, page aligned (ncclMemAlloc).
 * Operations read a peer's buffer in place when it lies in such memory: one pass over the
 * bytes instead of one copy into a shared ring and one out of it (messages of
 * XCCL_PEER_READ_MIN bytes or more between the processes of one host). On the host device
 * each allocation is a memfd with a header page (no name in /dev/shm; freed by the kernel
 * with the last process that maps it). Free with xcclMemFree. */
XCCL_API xcclResult_t xcclMemAlloc(void** ptr, size_t size);
/* Frees memory from xcclMemAlloc; NULL is a no-op; any other pointer is xcclInvalidArgument.
 * No operation may still be using it. */
XCCL_API xcclResult_t xcclMemFree(void* ptr);
/* Declares buff[0, size) as a buffer comm's operations will use (ncclCommRegister). It must
 * be memory comm's device can share with the processes of its host (within one xcclMemAlloc
 * allocation on the host device; device memory on xdev) and must not overlap a buffer
 * registered with comm already: otherwise xcclInvalidArgument says which, at registration,
 * instead of a silent fall back to copies through the rings. Such memory is read in place
 * whether registered or not; *handle is for xcclCommDeregister. */
XCCL_API xcclResult_t xcclCommRegister(const xcclComm_t comm, void* buff, size_t size,
                                       void** handle);
/* Forgets a registration; a handle comm did not give (or gave and took back) is
 * xcclInvalidArgument. */
XCCL_API xcclResult_t xcclCommDeregister(const xcclComm_t comm, void* handle);

/* Windows (ncclCommWindowRegister): a buffer of the same size on every rank that the other
 * ranks of its host write into with xcclPutSignal. Collective: every rank of comm calls it
 * with its own buffer of `size` bytes, which must be memory the host's processes can map
 * (xcclMemAlloc; on xdev, device memory); a rank whose buffer is not, or sizes that differ,
 * fail every rank with xcclInvalidArgument naming the rank. Communicators of the host and
 * xdev devices so far (CUDA: xcclInvalidUsage); ranks on other hosts are not reachable
 * through a window. Registration returns when every rank has mapped its peers' windows.
 * winFlags: 0. Deregister is collective too (a barrier: no put reaches a window after its
 * owner deregistered it). */
typedef struct xcclWindow* xcclWindow_t;
XCCL_API xcclResult_t xcclCommWindowRegister(xcclComm_t comm, void* buff, size_t size,
                                             xcclWindow_t* win, int winFlags);
XCCL_API xcclResult_t xcclCommWindowDeregister(xcclComm_t comm, xcclWindow_t win);
/* One-sided: copies count elements from localbuff into peer's window at byte offset
 * peerWinOffset, then adds one to peer's signal counter (this rank, sigIdx), so that data is
 * visible to peer once its xcclWaitSignal counted the signal. Host communicators: on the
 * calling thread, after every operation enqueued on comm before (stream: NULL or
 * XCCL_STREAM_CALLER). xdev communicators: an operation on `stream` (NULL: the device's
 * default stream), as NCCL's on a CUDA stream: it starts after the stream's earlier work and
 * comm's earlier operations, later work on the stream waits for it, and the call returns at
 * once. A range outside the window is xcclInvalidArgument; a peer on another host
 * xcclInvalidUsage (both at the call, nothing queued).
 * sigIdx in [0, 16); ctx and flags 0. xcclSignal: the signal alone. */
XCCL_API xcclResult_t xcclPutSignal(const void* localbuff, size_t count, xcclDataType_t datatype,
                                    int peer, xcclWindow_t peerWin, size_t peerWinOffset,
                                    int sigIdx, int ctx, unsigned int flags, xcclComm_t comm,
                                    xcclStream_t stream);
XCCL_API xcclResult_t xcclSignal(int peer, int sigIdx, int ctx, unsigned int flags, xcclComm_t comm,
                                 xcclStream_t stream);
/* Waits, for each descriptor, until opCnt more signals (peer, sigIdx) arrived than earlier
 * waits of this rank counted. Fails with xcclRemoteError when the peer's process exits
 * before, xcclTimeout after the communicator's timeout. On xdev the wait is an operation on
 * `stream` (as xcclPutSignal's): work queued after it sees every counted put; a failed wait
 * fails comm and the stream, naming the peer. */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} xcclWaitSignalDesc_t;
XCCL_API xcclResult_t xcclWaitSignal(int nDesc, const xcclWaitSignalDesc_t* signalDescs,
                                     xcclComm_t comm, xcclStream_t stream);

/* ---- completion ---- */
/* The position of every operation enqueued on comm so far. xcclInvalidUsage inside an open
 * group on the calling thread (its operations are only recorded until xcclGroupEnd). */
XCCL_API xcclResult_t xcclEventRecord(xcclEvent_t* event, xcclComm_t comm);
/* xcclSuccess when done, xcclInProgress when not, or the error that failed it. */
XCCL_API xcclResult_t xcclEventQuery(const xcclEvent_t* event);
/* timeout_ms < 0 waits up to the communicator's timeout. */
XCCL_API xcclResult_t xcclEventWait(const xcclEvent_t* event, int64_t timeout_ms);
/* Milliseconds from `start` to `end`, two events of one communicator, as cudaEventElapsedTime:
 * an event is reached when it was recorded and the operations it marks are done, whichever
 * is later. Record `start` just before enqueueing operations and `end` just after: the
 * result is the time they took on the communicator, waiting for earlier operations
 * excluded. xcclInProgress while either is not reached; the error of a failed operation;
 * xcclInvalidUsage for events of different communicators, or when the operation an event
 * marks completed more than 4096 operations ago (its time is no longer kept). */
XCCL_API xcclResult_t xcclEventElapsedTime(float* ms, const xcclEvent_t* start,
                                           const xcclEvent_t* end);

/* ---- collectives (counts are in elements of `datatype`) ---- */
XCCL_API xcclResult_t xcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    xcclDataType_t datatype, xcclRedOp_t op, xcclComm_t comm,
                                    xcclStream_t stream);
/* PremulSum: like xcclAllReduce with xcclSum after multiplying every input by
 * *scalar (a host value of `datatype`). */
XCCL_API xcclResult_t xcclAllReducePremulSum(const void* sendbuff, void* recvbuff, size_t count,
                                             xcclDataType_t datatype, const void* scalar,
                                             xcclComm_t comm, xcclStream_t stream);
XCCL_API xcclResult_t xcclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    xcclDataType_t datatype, int root, xcclComm_t comm,
                                    xcclStream_t stream);
XCCL_API xcclResult_t xcclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 xcclDataType_t datatype, xcclRedOp_t op, int root, xcclComm_t comm,
                                 xcclStream_t stream);
/* recvbuff holds nranks * sendcount elements, rank-major. */
XCCL_API xcclResult_t xcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    xcclDataType_t datatype, xcclComm_t comm, xcclStream_t stream);
/* sendbuff holds nranks * recvcount elements; rank r receives block r reduced. */
XCCL_API xcclResult_t xcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        xcclDataType_t datatype, xcclRedOp_t op, xcclComm_t comm,
                                        xcclStream_t stream);
/* Block i of sendbuff (count elements) goes to rank i; block j of recvbuff
 * comes from rank j. In place (sendbuff == recvbuff) is rejected, as in NCCL. */
XCCL_API xcclResult_t xcclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                   xcclDataType_t datatype, xcclComm_t comm, xcclStream_t stream);
/* Uneven all-to-all; counts and displacements in elements, one per rank.
 * sendcounts[rank] must equal recvcounts[rank]; in place is rejected. */
XCCL_API xcclResult_t xcclAllToAllv(const void* sendbuff, const size_t* sendcounts,
                                    const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                                    const size_t* rdispls, xcclDataType_t datatype, xcclComm_t comm,
                                    xcclStream_t stream);
/* Uneven allgather: rank i's block (recvcounts[i] elements) lands at displs[i] elements into
 * recvbuff; this rank sends sendcount elements, which must equal recvcounts[rank]. In place
 * when sendbuff == recvbuff + displs[rank] elements. Blocks must not overlap. */
XCCL_API xcclResult_t xcclAllGatherv(const void* sendbuff, size_t sendcount, void* recvbuff,
                                     const size_t* recvcounts, const size_t* displs,
                                     xcclDataType_t datatype, xcclComm_t comm, xcclStream_t stream);
/* Uneven reduce-scatter: block i of sendbuff (recvcounts[i] elements at displs[i]) is
 * reduced over all ranks into rank i's recvbuff. In place when recvbuff == sendbuff +
 * displs[rank] elements. Every op but PremulSum (Avg divides by nranks). */
XCCL_API xcclResult_t xcclReduceScatterv(const void* sendbuff, void* recvbuff,
                                         const size_t* recvcounts, const size_t* displs,
                                         xcclDataType_t datatype, xcclRedOp_t op, xcclComm_t comm,
                                         xcclStream_t stream);
/* recvbuff (root only) holds nranks * count elements, rank-major. */
XCCL_API xcclResult_t xcclGather(const void* sendbuff, void* recvbuff, size_t count,
                                 xcclDataType_t datatype, int root, xcclComm_t comm,
                                 xcclStream_t stream);
/* sendbuff (root only) holds nranks * count elements, rank-major. */
XCCL_API xcclResult_t xcclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                  xcclDataType_t datatype, int root, xcclComm_t comm,
                                  xcclStream_t stream);
/* Point-to-point messages between two ranks match in issue order (there are no tags).
 * Sending to or receiving from oneself is allowed inside a group, where the send is
 * copied into the matching receive (same order, same size). */
XCCL_API xcclResult_t xcclSend(const void* sendbuff, size_t count, xcclDataType_t datatype,
                               int peer, xcclComm_t comm, xcclStream_t stream);
XCCL_API xcclResult_t xcclRecv(void* recvbuff, size_t count, xcclDataType_t datatype, int peer,
                               xcclComm_t comm, xcclStream_t stream);
/* Receives from whichever rank's point-to-point send arrives first; the sender's
 * rank is written to *peer when the operation completes (read it after waiting). */
XCCL_API xcclResult_t xcclRecvAny(void* recvbuff, size_t count, xcclDataType_t datatype, int* peer,
                                  xcclComm_t comm, xcclStream_t stream);
/* A barrier is an operation like any other: it completes when every rank
 * has reached it. */
XCCL_API xcclResult_t xcclBarrier(xcclComm_t comm, xcclStream_t stream);

/* ---- grouping ----
 * Operations issued between xcclGroupStart and xcclGroupEnd on one thread
 * are enqueued together per communicator when the outermost xcclGroupEnd is
 * called. Within a group, collectives run in issue order, and all Send/Recv
 * of the group then progress concurrently (so any matching set of sends and
 * receives completes without deadlock). */
XCCL_API xcclResult_t xcclGroupStart(void);
XCCL_API xcclResult_t xcclGroupEnd(void);
/* Ends the calling thread's open group, nested levels included, without running anything
 * it recorded (a caller whose group failed half-way: what it recorded never reaches a
 * peer). xcclInvalidUsage when no group is open. */
XCCL_API xcclResult_t xcclGroupDiscard(void);

/* ---- helpers ---- */
XCCL_API size_t xcclTypeSize(xcclDataType_t datatype);
XCCL_API const char* xcclTypeName(xcclDataType_t datatype);
XCCL_API const char* xcclOpName(xcclRedOp_t op);

#ifdef __cplusplus
}
#endif

#endif /* XCCL_H_ */
