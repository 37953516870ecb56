/*
 * xccl_net.h — the network plugin ABI: how a vendor brings a NIC to libxccl.
 *
 * A plugin is a shared library that exports one table of functions under the symbol
 * XCCL_NET_PLUGIN_SYMBOL ("xcclNetPlugin_v1"). libxccl loads it when XCCL_NET_PLUGIN names it:
 * a path ("/opt/vendor/libxccl-net-foo.so") or a short name ("foo" is looked up as
 * "libxccl-net-foo.so" through the dynamic loader's search path). The table is versioned by
 * its symbol: a later ABI adds xcclNetPlugin_v2 and libxccl keeps reading v1 tables.
 * libxccl's own sockets are the built-in implementation of the same table
 * (XCCL_NET_PLUGIN=socket), so the seam runs the conformance suite with no plugin at all.
 *
 * The model (NCCL's ext-net shape, reduced to what libxccl uses):
 *   - a plugin has devices (NICs), numbered 0..n-1, each with properties;
 *   - a receiving rank listens on a device and gets an opaque handle of at most
 *     XCCL_NET_HANDLE_MAXSIZE bytes, which libxccl carries to the sender through its
 *     bootstrap (a plugin never needs a store or an out-of-band channel of its own);
 *   - the sender connects to that handle and gets a send communicator; the receiver accepts
 *     and gets the matching receive communicator: one direction, one pair;
 *   - messages are posted (isend, irecv) and polled (test); on one pair they match in the
 *     order they were posted, a receive of `size` bytes takes a message of at most that many
 *     bytes and test reports how many arrived;
 *   - nothing blocks: connect and accept may return a NULL communicator, isend and irecv a
 *     NULL request, meaning "not yet, call again"; libxccl calls again from its progress
 *     loop, under its own deadlines and abort flag.
 *
 * Threads: libxccl calls one communicator (and the requests posted on it) from one thread at
 * a time, but different communicators from different threads; a plugin's shared state must
 * be thread-safe.
 *
 * Errors: every function returns an xcclResult_t. xcclRemoteError means the peer went away
 * or sent something impossible (libxccl fails the operations on that pair and names the
 * peer); xcclSystemError a local failure; xcclInvalidArgument a bad call. The logger passed
 * to init() is how a plugin's messages reach XCCL_DEBUG's output.
 *
 * A peer's death: test() of a request on a pair whose peer died (or closed) should return
 * xcclRemoteError within seconds. libxccl has no other watch over a plugin's pairs than the
 * operation's timeout, so a plugin whose provider does not report deaths must find out
 * itself (the libfabric plugin pings).
 *
 * Lifetime: there is no finalize in v1; a plugin, once loaded, lives until the process exits.
 */
#ifndef XCCL_NET_H_
#define XCCL_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "xccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XCCL_NET_PLUGIN_SYMBOL "xcclNetPlugin_v1"
#define XCCL_NET_HANDLE_MAXSIZE 128

/* Where the memory given to regMr/isend/irecv may live (properties.ptrSupport). */
#define XCCL_NET_PTR_HOST 0x1
#define XCCL_NET_PTR_DEVICE 0x2 /* device memory the NIC reaches directly (GPUDirect-like) */

/* Levels of the logger. */
typedef enum {
  XCCL_NET_LOG_WARN = 1,
  XCCL_NET_LOG_INFO = 2,
  XCCL_NET_LOG_TRACE = 3
} xcclNetLogLevel_t;

/* printf-like; the plugin's name and the level are added by libxccl. */
typedef void (*xcclNetLogger_t)(xcclNetLogLevel_t level, const char* fmt, ...);

typedef struct {
  char name[64];          /* the NIC or fabric, for logs ("eth0", "mlx5_0", "tcp;ofi_rxm") */
  char address[64];       /* where it listens, for logs and topology ("10.0.0.5") */
  int speedMbps;          /* link speed; 0 when unknown */
  int latencyUs;          /* one-way latency estimate for the cost model; 0 when unknown */
  int ptrSupport;         /* XCCL_NET_PTR_* */
  int regIsGlobal;        /* 1: a registration made on one comm serves every comm */
  size_t maxMessageBytes; /* the largest message one isend may carry (SIZE_MAX: no limit;
                             callers size nothing after it) */
  int maxComms;           /* how many communicators the device can hold; 0 = no limit */
} xcclNetProperties_v1_t;

typedef struct {
  /* Shown in logs and in xcclCommQueryProperties-like reports ("socket", "libfabric"). */
  const char* name;
  /* Called once per process before anything else (libxccl serialises it). */
  xcclResult_t (*init)(xcclNetLogger_t logger);
  /* How many devices (NICs) this plugin drives; 0 is allowed and means "none here". */
  xcclResult_t (*devices)(int* ndev);
  xcclResult_t (*getProperties)(int dev, xcclNetProperties_v1_t* props);
  /* Listens on `dev`; fills `handle` (XCCL_NET_HANDLE_MAXSIZE bytes, any content the
     plugin's connect understands) and returns a listen communicator. */
  xcclResult_t (*listen)(int dev, void* handle, void** listenComm);
  /* Connects to a peer's handle. *sendComm stays NULL until the connection is made: call
     again with the same arguments. Connections to one listener are interchangeable: a plugin
     may finish any pending connect of that handle on such a call. */
  xcclResult_t (*connect)(int dev, const void* handle, void** sendComm);
  /* The next connection to this listener, or *recvComm == NULL when none is ready yet. Which
     sender it is, is for the caller to learn (libxccl sends a hello first). */
  xcclResult_t (*accept)(void* listenComm, void** recvComm);
  /* Registers memory for isend/irecv on `comm` (a send or receive communicator). `type` is
     XCCL_NET_PTR_HOST or XCCL_NET_PTR_DEVICE. A plugin that needs no registration returns a
     non-NULL token of its choice. libxccl registers every buffer it posts and passes the
     token to isend/irecv (never NULL); `data` may be NULL only when `size` is 0. */
  xcclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  xcclResult_t (*deregMr)(void* comm, void* mhandle);
  /* Posts a send of `size` bytes (0 allowed). *request stays NULL when the plugin cannot take
     it now: call again. The memory must stay untouched until test says done. */
  xcclResult_t (*isend)(void* sendComm, void* data, size_t size, void* mhandle, void** request);
  /* Posts a receive of at most `size` bytes into `data`. */
  xcclResult_t (*irecv)(void* recvComm, void* data, size_t size, void* mhandle, void** request);
  /* Progresses and tests a request. *done = 1 once complete (the request is then freed by the
     plugin and must not be tested again); *size is the bytes sent or received. */
  xcclResult_t (*test)(void* request, int* done, size_t* size);
  /* Close communicators; requests still posted on them are abandoned and never tested
     again. A close never blocks on the peer. xcclSuccess: the plugin no longer touches the
     memory of those requests. xcclInProgress: it may still (a send the provider cannot
     cancel, a receive already taking a message): the caller keeps that memory valid until
     the process exits. A close also releases the registrations made on the communicator
     (once nothing uses them); deregMr is for a buffer the caller stops using before. */
  xcclResult_t (*closeSend)(void* sendComm);
  xcclResult_t (*closeRecv)(void* recvComm);
  xcclResult_t (*closeListen)(void* listenComm);
} xcclNet_v1_t;

#ifdef __cplusplus
}
#endif

#endif /* XCCL_NET_H_ */
