// The C API edge, shared by its files (internal to core/api_*.cc):
//
//   api_edge.cc    version, error strings, names, the last error, queries and events
//   api_comm.cc    communicator creation and destruction
//   api_derive.cc  split, shrink, revoke and the liveness probe (derive.h)
//   api_coll.cc    the collective and point-to-point entries: each builds one CollArgs
//   api_group.cc   the one validator, groups, and the way a call reaches the queue
//
// Every entry runs its body through guarded(): the one place where C++ exceptions become
// xcclResult_t codes, the message kept for xcclGetLastError and prefixed with the entry's
// name, so nothing inside an entry repeats the name.
#pragma once

#include <atomic>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "collectives/algorithms/exchange.h"
#include "comm.h"
#include "common/error.h"
#include "common/log.h"
#include "result.h"
#include "xccl.h"

namespace xccl {
// A non-blocking creation (xcclConfig_t.blocking = 0, api_comm.cc): its thread sets the
// handle's impl, or the error, before it publishes `state` (release); readers acquire it.
struct PendingCreation {
  std::atomic<bool> cancel{false};
  std::atomic<xcclResult_t> state{xcclInProgress};
  std::string error;  // the creation's failure, set before state
  std::thread thread;
};
}  // namespace xccl

struct xcclComm {
  std::unique_ptr<xccl::Comm> impl;
  // Set while (and after) a non-blocking creation runs: impl is valid only once its state
  // is xcclSuccess.
  std::unique_ptr<xccl::PendingCreation> pending;
};

namespace xccl {

// This thread's last error (xcclGetLastError without a failed communicator).
std::string& lastErrorText();

// Runs fn, converting exceptions to result codes. Argument errors are reported at once and
// do not fail the communicator; only errors inside the progress thread are sticky.
template <typename Fn>
xcclResult_t guarded(const char* what, Fn&& fn) {
  try {
    fn();
    return xcclSuccess;
  } catch (const Error& e) {
    lastErrorText() = strCat(what, ": ", e.what());
    if (e.kind() != ErrorKind::kInvalidArgument) XCCL_WARN(INIT, lastErrorText());
    return toResult(e.kind());
  } catch (const std::bad_alloc&) {
    lastErrorText() = strCat(what, ": out of memory");
    return xcclSystemError;
  } catch (const std::exception& e) {
    lastErrorText() = strCat(what, ": internal error: ", e.what());
    XCCL_WARN(INIT, lastErrorText());
    return xcclInternalError;
  }
}

// The communicator behind a handle; InvalidArgument for NULL or a destroyed one,
// InvalidUsage for one whose non-blocking creation is running or failed.
Comm& commOf(xcclComm_t comm);
// Ends a non-blocking creation still running on comm (cancels it, joins its thread); a no-op
// for a communicator made in one call. Before a handle is freed.
void stopCreation(xcclComm_t comm);

// Checks one call (the validator: every check of a collective or point-to-point entry that
// its CollArgs can express) and then enqueues it, runs it on the caller
// (XCCL_STREAM_CALLER), or records it in the open group. InvalidArgument for a bad call.
void submit(Comm& comm, CollArgs args, xcclStream_t stream);

// Whether the calling thread is between xcclGroupStart and its outermost xcclGroupEnd.
bool inOpenGroup();
// Drops the calling thread's grouped operations on `comm` (it is being freed).
void forgetGroupedOps(const Comm* comm);

}  // namespace xccl
