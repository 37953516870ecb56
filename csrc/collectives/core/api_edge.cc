// The edge's shared state (the last error, handles) and the entries that only read:
// version, error strings, names, the last error, communicator queries and events.
#include <algorithm>
#include <string>

#include "api_edge.h"
#include "collectives/device/device.h"
#include "common/clock.h"

namespace xccl {

namespace {
thread_local std::string tlsLastError;
}  // namespace

std::string& lastErrorText() { return tlsLastError; }

Comm& commOf(xcclComm_t comm) {
  XCCL_CHECK_ARG(comm != nullptr, "comm is NULL or destroyed");
  if (comm->pending) {
    const xcclResult_t st = comm->pending->state.load(std::memory_order_acquire);
    if (st == xcclInProgress) {
      throw InvalidUsage(
          "the communicator is still being created (non-blocking): poll "
          "xcclCommGetAsyncError until it is not xcclInProgress");
    }
    if (st != xcclSuccess) {
      throw InvalidUsage(strCat("the communicator's creation failed: ", comm->pending->error));
    }
  }
  XCCL_CHECK_ARG(comm->impl, "comm is NULL or destroyed");
  return *comm->impl;
}

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
  if (comm != nullptr && comm->pending) {
    const xcclResult_t st = comm->pending->state.load(std::memory_order_acquire);
    if (st == xcclInProgress) return "";
    if (st != xcclSuccess) {
      buf = comm->pending->error;
      return buf.c_str();
    }
  }
  if (comm != nullptr && comm->impl && comm->impl->asyncError() != xcclSuccess) {
    buf = comm->impl->lastError();
    return buf.c_str();
  }
  return tlsLastError.c_str();
}

size_t xcclTypeSize(xcclDataType_t t) { return dtypeSize(t); }

const char* xcclTypeName(xcclDataType_t t) {
  static const char* names[] = {"int8",       "uint8",   "int32",    "int64", "float16",
                                "float32",    "float64", "bfloat16", "bool",  "float8e4m3",
                                "float8e5m2", "uint16",  "uint32",   "uint64"};
  static_assert(sizeof(names) / sizeof(names[0]) == xcclNumTypes, "a name per type");
  return (t >= 0 && t < xcclNumTypes) ? names[t] : "invalid-dtype";
}

const char* xcclOpName(xcclRedOp_t op) {
  static const char* names[] = {"sum",       "prod", "max", "min", "avg",
                                "premulsum", "band", "bor", "bxor"};
  return (op >= 0 && op < xcclNumOps) ? names[op] : "invalid-op";
}

xcclResult_t xcclCommGetAsyncError(xcclComm_t comm, xcclResult_t* asyncError) {
  return guarded("xcclCommGetAsyncError", [&] {
    XCCL_CHECK_ARG(asyncError != nullptr, "asyncError is NULL");
    if (comm != nullptr && comm->pending) {
      // A non-blocking creation: in progress, failed (its error), or done (the comm's state).
      const xcclResult_t st = comm->pending->state.load(std::memory_order_acquire);
      if (st != xcclSuccess) {
        *asyncError = st;
        return;
      }
    }
    *asyncError = commOf(comm).asyncError();
  });
}

xcclResult_t xcclCommCount(const xcclComm_t comm, int* count) {
  return guarded("xcclCommCount", [&] {
    XCCL_CHECK_ARG(count != nullptr, "count is NULL");
    *count = commOf(comm).nranks();
  });
}

xcclResult_t xcclCommUserRank(const xcclComm_t comm, int* rank) {
  return guarded("xcclCommUserRank", [&] {
    XCCL_CHECK_ARG(rank != nullptr, "rank is NULL");
    *rank = commOf(comm).rank();
  });
}

xcclResult_t xcclEventRecord(xcclEvent_t* event, xcclComm_t comm) {
  return guarded("xcclEventRecord", [&] {
    XCCL_CHECK_ARG(event != nullptr, "event is NULL");
    // Inside a group the operations are only recorded: an event now would be complete before
    // they ran (an output read as a result although it was never reduced).
    if (inOpenGroup()) {
      throw InvalidUsage(
          "called inside an open group (xcclGroupStart without its xcclGroupEnd on this "
          "thread): the group's operations have not been enqueued yet; record after "
          "xcclGroupEnd");
    }
    event->comm = comm;
    event->seq = commOf(comm).lastEnqueued();
    event->recordedNs = steadyNs();
  });
}

xcclResult_t xcclEventElapsedTime(float* ms, const xcclEvent_t* start, const xcclEvent_t* end) {
  xcclResult_t r = xcclSuccess;
  xcclResult_t g = guarded("xcclEventElapsedTime", [&] {
    XCCL_CHECK_ARG(ms != nullptr && start != nullptr && end != nullptr,
                   "ms, start and end must be non-NULL");
    if (start->comm != end->comm) {
      throw InvalidUsage("start and end were recorded on different communicators");
    }
    Comm& c = commOf(start->comm);
    for (const xcclEvent_t* e : {start, end}) {
      r = c.query(e->seq);
      if (r != xcclSuccess) return;
    }
    // Reached when recorded and its operations done, whichever came later.
    auto reached = [&](const xcclEvent_t& e) {
      if (e.seq == 0) return e.recordedNs;
      const int64_t done = c.doneNs(e.seq);
      if (done < 0) {
        throw InvalidUsage(strCat("operation ", e.seq, " completed more than ", Comm::kDoneTimes,
                                  " operations ago: its time is not kept"));
      }
      return std::max(e.recordedNs, done);
    };
    *ms = static_cast<float>(static_cast<double>(reached(*end) - reached(*start)) / 1e6);
  });
  return g != xcclSuccess ? g : r;
}

xcclResult_t xcclEventQuery(const xcclEvent_t* event) {
  xcclResult_t r = xcclSuccess;
  xcclResult_t g = guarded("xcclEventQuery", [&] {
    XCCL_CHECK_ARG(event != nullptr, "event is NULL");
    r = commOf(event->comm).query(event->seq);
  });
  return g != xcclSuccess ? g : r;
}

xcclResult_t xcclEventWait(const xcclEvent_t* event, int64_t timeout_ms) {
  xcclResult_t r = xcclSuccess;
  xcclResult_t g = guarded("xcclEventWait", [&] {
    XCCL_CHECK_ARG(event != nullptr, "event is NULL");
    Comm& c = commOf(event->comm);
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

}  // extern "C"
