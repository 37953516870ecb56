// The C API edge: argument checks, group bookkeeping, and the one place where C++
// exceptions become xcclResult_t codes (the message is kept for xcclGetLastError).
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/bootstrap/bootstrap.h"
#include "collectives/bootstrap/bootstrap_internal.h"
#include "collectives/device/device.h"
#include "collectives/transport/tcp/socket.h"
#include "comm.h"
#include "common/error.h"
#include "common/log.h"
#include "result.h"
#include "xccl.h"

struct xcclComm {
  std::unique_ptr<xccl::Comm> impl;
};

namespace xccl {
namespace {

thread_local std::string tlsLastError;

// Runs fn, converting exceptions to result codes. Argument errors are reported at once and
// do not fail the communicator; only errors inside the progress thread are sticky.
template <typename Fn>
xcclResult_t guarded(const char* what, Fn&& fn) {
  try {
    fn();
    return xcclSuccess;
  } catch (const Error& e) {
    tlsLastError = strCat(what, ": ", e.what());
    if (e.kind() != ErrorKind::kInvalidArgument) XCCL_WARN(INIT, tlsLastError);
    return toResult(e.kind());
  } catch (const std::bad_alloc&) {
    tlsLastError = strCat(what, ": out of memory");
    return xcclSystemError;
  } catch (const std::exception& e) {
    tlsLastError = strCat(what, ": internal error: ", e.what());
    XCCL_WARN(INIT, tlsLastError);
    return xcclInternalError;
  }
}

Comm& commOf(xcclComm_t comm, const char* what) {
  XCCL_CHECK_ARG(comm != nullptr && comm->impl, what, ": comm is NULL or destroyed");
  return *comm->impl;
}

// ---- groups: per-thread list of (comm, args) until the outermost xcclGroupEnd ----
thread_local int tlsGroupDepth = 0;
struct GroupedOp {
  Comm* comm;
  CollArgs args;
  xcclStream_t stream;
};
thread_local std::vector<GroupedOp> tlsGroupOps;

// Sends to and receives from oneself pair up in issue order within one group; their
// counts must match so the progress thread can copy each send into its receive.
void checkSelfP2P(const Comm& comm, const std::vector<CollArgs>& p2p) {
  std::vector<size_t> sends, recvs;
  for (const CollArgs& a : p2p) {
    if (a.root != comm.rank() || a.type == CollType::kRecvAny) continue;
    (a.type == CollType::kSend ? sends : recvs).push_back(a.count * dtypeSize(a.dtype));
  }
  XCCL_CHECK_ARG(sends.size() == recvs.size(), "xcclGroupEnd: rank ", comm.rank(), " posts ",
                 sends.size(), " send(s) to itself but ", recvs.size(), " receive(s) from itself");
  for (size_t i = 0; i < sends.size(); ++i) {
    XCCL_CHECK_ARG(sends[i] == recvs[i], "xcclGroupEnd: rank ", comm.rank(), ": send #", i,
                   " to itself has ", sends[i], " bytes but the matching receive has ", recvs[i]);
  }
}

// XCCL_STREAM_CALLER: run on this thread and return the operation's outcome as the
// call's (the sticky error names it); otherwise enqueue for the progress thread.
void enqueueOrRun(Comm& comm, OpEntry op) {
  if (op.stream != XCCL_STREAM_CALLER) {
    comm.enqueue(std::move(op));
    return;
  }
  const uint64_t id = comm.runOnCaller(std::move(op));
  const xcclResult_t r = comm.query(id);
  if (r != xcclSuccess) throw Error(toKind(r), comm.lastError());
}

void submit(Comm& comm, CollArgs args, xcclStream_t stream) {
  validateCollArgs(args, comm.rank(), comm.nranks());
  if (isPointToPoint(args.type) && args.type != CollType::kRecvAny) {
    XCCL_CHECK_ARG(args.root != comm.rank() || tlsGroupDepth > 0, collName(args.type), ": rank ",
                   args.root,
                   " sends to or receives from itself outside a group (it would wait "
                   "for itself); put the send and the receive in one xcclGroupStart/End");
  }
  if (tlsGroupDepth > 0) {
    tlsGroupOps.push_back({&comm, std::move(args), stream});
    return;
  }
  OpEntry op;
  op.stream = stream;
  (isPointToPoint(args.type) ? op.p2p : op.colls).push_back(std::move(args));
  enqueueOrRun(comm, std::move(op));
}

void checkType(xcclDataType_t dtype, const char* what) {
  XCCL_CHECK_ARG(dtype >= 0 && dtype < xcclNumTypes, what, ": invalid datatype ",
                 static_cast<int>(dtype));
}

void checkOp(xcclDataType_t dtype, xcclRedOp_t op, const char* what) {
  checkType(dtype, what);
  XCCL_CHECK_ARG(op >= 0 && op < xcclNumOps, what, ": invalid reduction op ", static_cast<int>(op));
  XCCL_CHECK_ARG(opSupported(dtype, op), what, ": op ", xcclOpName(op), " is not supported for ",
                 xcclTypeName(dtype));
}

void checkBuf(const void* p, size_t count, const char* name, const char* what) {
  XCCL_CHECK_ARG(p != nullptr || count == 0, what, ": ", name, " is NULL with count ", count);
}

void checkRank(int r, const Comm& c, const char* role, const char* what) {
  XCCL_CHECK_ARG(r >= 0 && r < c.nranks(), what, ": ", role, " ", r, " out of range [0, ",
                 c.nranks(), ")");
}

CollArgs makeArgs(CollType type, const void* sendbuf, void* recvbuf, size_t count,
                  xcclDataType_t dtype) {
  CollArgs a;
  a.type = type;
  a.sendbuf = sendbuf;
  a.recvbuf = recvbuf;
  a.count = count;
  a.dtype = dtype;
  return a;
}

xcclResult_t initComm(xcclComm_t* out, int nranks, int rank, Store& store,
                      const std::string& secret, const xcclConfig_t* config) {
  xcclConfig_t cfg{};
  cfg.device = -1;
  if (config) cfg = *config;
  auto c = std::make_unique<xcclComm>();
  c->impl = std::make_unique<Comm>(store, rank, nranks, secret, cfg);
  *out = c.release();
  return xcclSuccess;
}

}  // namespace
}  // namespace xccl

using namespace xccl;  // NOLINT: this file is the API edge

extern "C" {

xcclResult_t xcclGetVersion(int* version) {
  if (version == nullptr) return xcclInvalidArgument;
  *version = XCCL_VERSION_CODE;
  return xcclSuccess;
}

const char* xcclGetErrorString(xcclResult_t r) {
  switch (r) {
    case xcclSuccess:
      return "no error";
    case xcclUnhandledError:
      return "unhandled error";
    case xcclSystemError:
      return "system error (a system call failed)";
    case xcclInternalError:
      return "internal error";
    case xcclInvalidArgument:
      return "invalid argument";
    case xcclInvalidUsage:
      return "invalid usage";
    case xcclRemoteError:
      return "remote error (a peer failed, exited or sent bad data)";
    case xcclInProgress:
      return "operation in progress";
    case xcclTimeout:
      return "operation timed out";
    default:
      return "unknown result code";
  }
}

const char* xcclGetLastError(xcclComm_t comm) {
  static thread_local std::string buf;
  if (comm != nullptr && comm->impl && comm->impl->asyncError() != xcclSuccess) {
    buf = comm->impl->lastError();
    return buf.c_str();
  }
  return tlsLastError.c_str();
}

size_t xcclTypeSize(xcclDataType_t t) { return dtypeSize(t); }

const char* xcclTypeName(xcclDataType_t t) {
  static const char* names[] = {"int8",    "uint8",   "int32",    "int64", "float16",
                                "float32", "float64", "bfloat16", "bool"};
  return (t >= 0 && t < xcclNumTypes) ? names[t] : "invalid-dtype";
}

const char* xcclOpName(xcclRedOp_t op) {
  static const char* names[] = {"sum",       "prod", "max", "min", "avg",
                                "premulsum", "band", "bor", "bxor"};
  return (op >= 0 && op < xcclNumOps) ? names[op] : "invalid-op";
}

xcclResult_t xcclGetUniqueId(xcclUniqueId* id) {
  return guarded("xcclGetUniqueId", [&] {
    XCCL_CHECK_ARG(id != nullptr, "uniqueId is NULL");
    createUniqueId(id);
  });
}

xcclResult_t xcclCommInitRankConfig(xcclComm_t* comm, int nranks, xcclUniqueId commId, int rank,
                                    const xcclConfig_t* config) {
  return guarded("xcclCommInitRank", [&] {
    XCCL_CHECK_ARG(comm != nullptr, "comm is NULL");
    XCCL_CHECK_ARG(nranks > 0 && rank >= 0 && rank < nranks, "rank ", rank, " / nranks ", nranks,
                   " out of range");
    int64_t t = config && config->timeout_ms > 0 ? config->timeout_ms : -1;
    auto store =
        connectUniqueIdStore(commId, t > 0 ? Deadline::after(t) : Deadline::after(30 * 60 * 1000));
    initComm(comm, nranks, rank, *store, uniqueIdSecret(commId), config);
  });
}

xcclResult_t xcclCommInitRank(xcclComm_t* comm, int nranks, xcclUniqueId commId, int rank) {
  return xcclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

xcclResult_t xcclCommInitRankStore(xcclComm_t* comm, int nranks, int rank, const xcclStore_t* store,
                                   const char* prefix, const xcclConfig_t* config) {
  return guarded("xcclCommInitRankStore", [&] {
    XCCL_CHECK_ARG(comm != nullptr && store != nullptr && store->set && store->get,
                   "comm, store and its callbacks must be non-NULL");
    XCCL_CHECK_ARG(nranks > 0 && rank >= 0 && rank < nranks, "rank ", rank, " / nranks ", nranks,
                   " out of range");
    // A setting every rank gets wrong alike (XCCL_SOCKET_IFNAME naming no interface) fails
    // here, before the store: otherwise rank 0 failing first leaves the others waiting on
    // its secret and reporting a lost store instead of the real cause.
    net::localAddress();
    auto s = makeCallbackStore(*store, prefix ? prefix : "");
    int64_t t = config && config->timeout_ms > 0 ? config->timeout_ms : 30 * 60 * 1000;
    // Rank 0 draws the communicator secret; the store is the trusted channel. The store may
    // still hold an earlier initialisation's records under this prefix (a re-initialisation,
    // or a restarted job whose store outlived its processes): the other ranks wait past a
    // stale secret record (bootstrap/rendezvous.cc), and every other record of this
    // initialisation lives under a scope derived from its secret, so holding the current
    // secret means reading only current records.
    std::string secret = rank == 0 ? publishSecret(*s) : awaitSecret(*s, rank, Deadline::after(t));
    auto scoped = makeScopedStore(*s, recordScope(secret));
    try {
      initComm(comm, nranks, rank, *scoped, secret, config);
    } catch (...) {
      retireSecret(secret);
      throw;
    }
    retireSecret(secret);
  });
}

xcclResult_t xcclCommInitAll(xcclComm_t* comms, int ndev, const int* devlist) {
  return xcclCommInitAllConfig(comms, ndev, devlist, nullptr);
}

xcclResult_t xcclCommInitAllConfig(xcclComm_t* comms, int ndev, const int* devlist,
                                   const xcclConfig_t* config) {
  return guarded("xcclCommInitAll", [&] {
    XCCL_CHECK_ARG(comms != nullptr, "comms is NULL");
    XCCL_CHECK_ARG(ndev > 0, "ndev ", ndev, " must be positive");
    for (int i = 0; devlist != nullptr && i < ndev; ++i) {
      for (int j = 0; j < i; ++j) {
        XCCL_CHECK_ARG(devlist[i] >= 0 && devlist[i] != devlist[j], "devlist[", i,
                       "] = ", devlist[i], ": devices must be distinct and non-negative");
      }
    }
    const xcclConfig_t base = config != nullptr ? *config : xcclConfig_t{};
    // A bad device fails here, before any rank waits for another.
    for (int i = 0; i < ndev; ++i) {
      getDevice(deviceKind(base.deviceType), devlist != nullptr ? devlist[i] : i);
    }
    // Initialisation is collective: every rank connects to every other, so each runs on
    // its own thread against one in-memory store.
    auto store = makeMemoryStore();
    const std::string secret = randomSecret();
    std::vector<xcclComm_t> made(ndev, nullptr);
    std::vector<std::string> errors(ndev);
    std::vector<std::thread> threads;
    for (int i = 0; i < ndev; ++i) {
      threads.emplace_back([&, i] {
        xcclConfig_t cfg = base;
        cfg.device = devlist != nullptr ? devlist[i] : i;
        try {
          initComm(&made[i], ndev, i, *store, secret, &cfg);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < ndev; ++i) {
      if (errors[i].empty()) continue;
      for (xcclComm_t c : made) {
        if (c != nullptr) xcclCommAbort(c);
      }
      throw InvalidUsage(
          strCat("rank ", i, " (device ", devlist ? devlist[i] : i, "): ", errors[i]));
    }
    std::copy(made.begin(), made.end(), comms);
  });
}

xcclResult_t xcclCommDestroy(xcclComm_t comm) {
  return guarded("xcclCommDestroy", [&] {
    if (comm == nullptr) return;
    comm->impl.reset();
    delete comm;
  });
}

xcclResult_t xcclCommAbort(xcclComm_t comm) {
  return guarded("xcclCommAbort", [&] {
    if (comm == nullptr) return;
    if (comm->impl) comm->impl->abort();
    comm->impl.reset();
    delete comm;
  });
}

xcclResult_t xcclCommInterrupt(xcclComm_t comm) {
  return guarded("xcclCommInterrupt", [&] { commOf(comm, "xcclCommInterrupt").abort(); });
}

xcclResult_t xcclCommGetAsyncError(xcclComm_t comm, xcclResult_t* asyncError) {
  return guarded("xcclCommGetAsyncError", [&] {
    XCCL_CHECK_ARG(asyncError != nullptr, "asyncError is NULL");
    *asyncError = commOf(comm, "xcclCommGetAsyncError").asyncError();
  });
}

xcclResult_t xcclCommCount(const xcclComm_t comm, int* count) {
  return guarded("xcclCommCount", [&] {
    XCCL_CHECK_ARG(count != nullptr, "count is NULL");
    *count = commOf(comm, "xcclCommCount").nranks();
  });
}

xcclResult_t xcclCommUserRank(const xcclComm_t comm, int* rank) {
  return guarded("xcclCommUserRank", [&] {
    XCCL_CHECK_ARG(rank != nullptr, "rank is NULL");
    *rank = commOf(comm, "xcclCommUserRank").rank();
  });
}

xcclResult_t xcclEventRecord(xcclEvent_t* event, xcclComm_t comm) {
  return guarded("xcclEventRecord", [&] {
    XCCL_CHECK_ARG(event != nullptr, "event is NULL");
    event->comm = comm;
    event->seq = commOf(comm, "xcclEventRecord").lastEnqueued();
  });
}

xcclResult_t xcclEventQuery(const xcclEvent_t* event) {
  xcclResult_t r = xcclSuccess;
  xcclResult_t g = guarded("xcclEventQuery", [&] {
    XCCL_CHECK_ARG(event != nullptr, "event is NULL");
    r = commOf(event->comm, "xcclEventQuery").query(event->seq);
  });
  return g != xcclSuccess ? g : r;
}

xcclResult_t xcclEventWait(const xcclEvent_t* event, int64_t timeout_ms) {
  xcclResult_t r = xcclSuccess;
  xcclResult_t g = guarded("xcclEventWait", [&] {
    XCCL_CHECK_ARG(event != nullptr, "event is NULL");
    Comm& c = commOf(event->comm, "xcclEventWait");
    r = c.wait(event->seq, timeout_ms);
    if (r == xcclTimeout) {
      tlsLastError =
          strCat("xcclEventWait: rank ", c.rank(), ": operation ", event->seq,
                 " not complete after ", timeout_ms < 0 ? c.timeoutMs() : timeout_ms, " ms");
    } else if (r != xcclSuccess) {
      tlsLastError = c.lastError();
    }
  });
  return g != xcclSuccess ? g : r;
}

xcclResult_t xcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           xcclDataType_t datatype, xcclRedOp_t op, xcclComm_t comm,
                           xcclStream_t stream) {
  return guarded("xcclAllReduce", [&] {
    Comm& c = commOf(comm, "xcclAllReduce");
    checkOp(datatype, op, "xcclAllReduce");
    XCCL_CHECK_ARG(op != xcclPremulSum, "xcclAllReduce: use xcclAllReducePremulSum for premulsum");
    checkBuf(sendbuff, count, "sendbuff", "xcclAllReduce");
    checkBuf(recvbuff, count, "recvbuff", "xcclAllReduce");
    CollArgs a = makeArgs(CollType::kAllReduce, sendbuff, recvbuff, count, datatype);
    a.op = op;
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclAllReducePremulSum(const void* sendbuff, void* recvbuff, size_t count,
                                    xcclDataType_t datatype, const void* scalar, xcclComm_t comm,
                                    xcclStream_t stream) {
  return guarded("xcclAllReducePremulSum", [&] {
    Comm& c = commOf(comm, "xcclAllReducePremulSum");
    checkOp(datatype, xcclPremulSum, "xcclAllReducePremulSum");
    XCCL_CHECK_ARG(scalar != nullptr, "xcclAllReducePremulSum: scalar is NULL");
    checkBuf(sendbuff, count, "sendbuff", "xcclAllReducePremulSum");
    checkBuf(recvbuff, count, "recvbuff", "xcclAllReducePremulSum");
    CollArgs a = makeArgs(CollType::kAllReduce, sendbuff, recvbuff, count, datatype);
    a.op = xcclPremulSum;
    std::memcpy(a.scalar, scalar, dtypeSize(datatype));
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           xcclDataType_t datatype, int root, xcclComm_t comm,
                           xcclStream_t stream) {
  return guarded("xcclBroadcast", [&] {
    Comm& c = commOf(comm, "xcclBroadcast");
    checkType(datatype, "xcclBroadcast");
    checkRank(root, c, "root", "xcclBroadcast");
    if (c.rank() == root) checkBuf(sendbuff, count, "sendbuff", "xcclBroadcast");
    checkBuf(recvbuff, count, "recvbuff", "xcclBroadcast");
    CollArgs a = makeArgs(CollType::kBroadcast, sendbuff, recvbuff, count, datatype);
    a.root = root;
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclReduce(const void* sendbuff, void* recvbuff, size_t count, xcclDataType_t datatype,
                        xcclRedOp_t op, int root, xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclReduce", [&] {
    Comm& c = commOf(comm, "xcclReduce");
    checkOp(datatype, op, "xcclReduce");
    XCCL_CHECK_ARG(op != xcclPremulSum, "xcclReduce: premulsum is only offered by allreduce");
    checkRank(root, c, "root", "xcclReduce");
    checkBuf(sendbuff, count, "sendbuff", "xcclReduce");
    if (c.rank() == root) checkBuf(recvbuff, count, "recvbuff", "xcclReduce");
    CollArgs a = makeArgs(CollType::kReduce, sendbuff, recvbuff, count, datatype);
    a.op = op;
    a.root = root;
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           xcclDataType_t datatype, xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclAllGather", [&] {
    Comm& c = commOf(comm, "xcclAllGather");
    checkType(datatype, "xcclAllGather");
    checkBuf(sendbuff, sendcount, "sendbuff", "xcclAllGather");
    checkBuf(recvbuff, sendcount, "recvbuff", "xcclAllGather");
    submit(c, makeArgs(CollType::kAllGather, sendbuff, recvbuff, sendcount, datatype), stream);
  });
}

xcclResult_t xcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               xcclDataType_t datatype, xcclRedOp_t op, xcclComm_t comm,
                               xcclStream_t stream) {
  return guarded("xcclReduceScatter", [&] {
    Comm& c = commOf(comm, "xcclReduceScatter");
    checkOp(datatype, op, "xcclReduceScatter");
    XCCL_CHECK_ARG(op != xcclPremulSum,
                   "xcclReduceScatter: premulsum is only offered by allreduce");
    checkBuf(sendbuff, recvcount, "sendbuff", "xcclReduceScatter");
    checkBuf(recvbuff, recvcount, "recvbuff", "xcclReduceScatter");
    CollArgs a = makeArgs(CollType::kReduceScatter, sendbuff, recvbuff, recvcount, datatype);
    a.op = op;
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          xcclDataType_t datatype, xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclAllToAll", [&] {
    Comm& c = commOf(comm, "xcclAllToAll");
    checkType(datatype, "xcclAllToAll");
    checkBuf(sendbuff, count, "sendbuff", "xcclAllToAll");
    checkBuf(recvbuff, count, "recvbuff", "xcclAllToAll");
    XCCL_CHECK_ARG(sendbuff != recvbuff || count == 0, "xcclAllToAll: in-place is not supported");
    submit(c, makeArgs(CollType::kAllToAll, sendbuff, recvbuff, count, datatype), stream);
  });
}

xcclResult_t xcclAllToAllv(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                           void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                           xcclDataType_t datatype, xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclAllToAllv", [&] {
    Comm& c = commOf(comm, "xcclAllToAllv");
    checkType(datatype, "xcclAllToAllv");
    XCCL_CHECK_ARG(sendcounts && sdispls && recvcounts && rdispls,
                   "xcclAllToAllv: counts and displacements must be non-NULL");
    CollArgs a = makeArgs(CollType::kAllToAllv, sendbuff, recvbuff, 0, datatype);
    const int n = c.nranks();
    a.sendcounts.assign(sendcounts, sendcounts + n);
    a.sdispls.assign(sdispls, sdispls + n);
    a.recvcounts.assign(recvcounts, recvcounts + n);
    a.rdispls.assign(rdispls, rdispls + n);
    size_t sendTotal = 0, recvTotal = 0;
    for (int i = 0; i < n; ++i) {
      sendTotal += sendcounts[i];
      recvTotal += recvcounts[i];
    }
    checkBuf(sendbuff, sendTotal, "sendbuff", "xcclAllToAllv");
    checkBuf(recvbuff, recvTotal, "recvbuff", "xcclAllToAllv");
    XCCL_CHECK_ARG(sendbuff != recvbuff || (sendTotal == 0 && recvTotal == 0),
                   "xcclAllToAllv: in-place is not supported");
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclGather(const void* sendbuff, void* recvbuff, size_t count, xcclDataType_t datatype,
                        int root, xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclGather", [&] {
    Comm& c = commOf(comm, "xcclGather");
    checkType(datatype, "xcclGather");
    checkRank(root, c, "root", "xcclGather");
    checkBuf(sendbuff, count, "sendbuff", "xcclGather");
    if (c.rank() == root) checkBuf(recvbuff, count, "recvbuff", "xcclGather");
    CollArgs a = makeArgs(CollType::kGather, sendbuff, recvbuff, count, datatype);
    a.root = root;
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         xcclDataType_t datatype, int root, xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclScatter", [&] {
    Comm& c = commOf(comm, "xcclScatter");
    checkType(datatype, "xcclScatter");
    checkRank(root, c, "root", "xcclScatter");
    if (c.rank() == root) checkBuf(sendbuff, count, "sendbuff", "xcclScatter");
    checkBuf(recvbuff, count, "recvbuff", "xcclScatter");
    CollArgs a = makeArgs(CollType::kScatter, sendbuff, recvbuff, count, datatype);
    a.root = root;
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclSend(const void* sendbuff, size_t count, xcclDataType_t datatype, int peer,
                      xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclSend", [&] {
    Comm& c = commOf(comm, "xcclSend");
    checkType(datatype, "xcclSend");
    checkRank(peer, c, "peer", "xcclSend");
    checkBuf(sendbuff, count, "sendbuff", "xcclSend");
    CollArgs a = makeArgs(CollType::kSend, sendbuff, nullptr, count, datatype);
    a.root = peer;
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclRecv(void* recvbuff, size_t count, xcclDataType_t datatype, int peer,
                      xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclRecv", [&] {
    Comm& c = commOf(comm, "xcclRecv");
    checkType(datatype, "xcclRecv");
    checkRank(peer, c, "peer", "xcclRecv");
    checkBuf(recvbuff, count, "recvbuff", "xcclRecv");
    CollArgs a = makeArgs(CollType::kRecv, nullptr, recvbuff, count, datatype);
    a.root = peer;
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclRecvAny(void* recvbuff, size_t count, xcclDataType_t datatype, int* peer,
                         xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclRecvAny", [&] {
    Comm& c = commOf(comm, "xcclRecvAny");
    checkType(datatype, "xcclRecvAny");
    XCCL_CHECK_ARG(c.nranks() > 1, "xcclRecvAny: no other rank to receive from");
    checkBuf(recvbuff, count, "recvbuff", "xcclRecvAny");
    CollArgs a = makeArgs(CollType::kRecvAny, nullptr, recvbuff, count, datatype);
    a.anyPeerOut = peer;
    submit(c, std::move(a), stream);
  });
}

xcclResult_t xcclBarrier(xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclBarrier", [&] {
    Comm& c = commOf(comm, "xcclBarrier");
    submit(c, makeArgs(CollType::kBarrier, nullptr, nullptr, 0, xcclUint8), stream);
  });
}

xcclResult_t xcclGroupStart(void) {
  ++tlsGroupDepth;
  return xcclSuccess;
}

xcclResult_t xcclGroupEnd(void) {
  return guarded("xcclGroupEnd", [&] {
    XCCL_CHECK(tlsGroupDepth > 0, "xcclGroupEnd without xcclGroupStart");
    if (--tlsGroupDepth > 0) return;
    // One queue entry per communicator, in order of first appearance.
    // A group's operations on one communicator are one entry, ordered on one stream.
    std::vector<std::pair<Comm*, OpEntry>> perComm;
    std::vector<GroupedOp> ops = std::move(tlsGroupOps);
    tlsGroupOps.clear();
    for (auto& g : ops) {
      auto it = std::find_if(perComm.begin(), perComm.end(),
                             [&](const auto& e) { return e.first == g.comm; });
      if (it == perComm.end()) {
        it = perComm.insert(perComm.end(), {g.comm, OpEntry{}});
        it->second.stream = g.stream;
      }
      XCCL_CHECK_ARG(it->second.stream == g.stream, "xcclGroupEnd: rank ", g.comm->rank(),
                     ": the operations of a group on one communicator must use one stream");
      (isPointToPoint(g.args.type) ? it->second.p2p : it->second.colls)
          .push_back(std::move(g.args));
    }
    for (auto& [comm, op] : perComm) checkSelfP2P(*comm, op.p2p);
    // Running one communicator's part of a group to its end before the next one is posted
    // could wait forever on a peer that waits for the other part first.
    for (auto& [comm, op] : perComm) {
      XCCL_CHECK_ARG(op.stream != XCCL_STREAM_CALLER || perComm.size() == 1,
                     "xcclGroupEnd: XCCL_STREAM_CALLER in a group that spans ", perComm.size(),
                     " communicators (one only)");
    }
    for (auto& [comm, op] : perComm) enqueueOrRun(*comm, std::move(op));
  });
}

}  // extern "C"
