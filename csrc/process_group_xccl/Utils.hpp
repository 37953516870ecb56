// Utils.hpp — helpers shared by the backend's files: environment knobs, errors, dtype and
// ReduceOp mapping, argument checks, staging (contiguous copies and copy-back), groups, and
// the adapter that lets libxccl rendezvous through c10d's Store.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "ProcessGroupXCCL.hpp"
#include "xccl.h"

namespace torch_xccl {

constexpr int64_t kPollMs = 100;  // longest single xcclEventWait slice

// ---- environment knobs (read when a process group is created)
// The backend's one reader, as strict as libxccl's XCCL_PARAM: unset or empty gives dflt;
// anything but a whole integer in [lo, hi] raises a ValueError naming the knob, its value and
// the range (a typo never silently becomes 0 or the default). docs/ENV.md lists every knob.
int64_t envKnob(const char* name, int64_t dflt, int64_t lo, int64_t hi);
bool blockingWaitFromEnv();         // TORCH_XCCL_BLOCKING_WAIT
AsyncErrorMode errorModeFromEnv();  // TORCH_XCCL_ASYNC_ERROR_HANDLING

// ---- errors: c10::DistBackendError with the op name in front
std::exception_ptr distError(const std::string& msg);
[[noreturn]] void throwDist(const std::string& msg);
std::string libError(xcclResult_t r, const char* detail);
// libxccl's text for a call on comm that it refused or that failed: this thread's last error
// (an argument refused at the edge), else the communicator's (a failed operation).
std::string callError(xcclComm_t comm);
// "allreduce(Float, 1048576)": the op and its first staged tensor, for the desync report.
std::string describeCall(const char* opName, const std::vector<at::Tensor>& tensors);

// ---- dtype / ReduceOp mapping and argument checks (TORCH_CHECK naming the op)
xcclDataType_t toXcclType(const char* op, at::ScalarType t);
bool isFloating(at::ScalarType t);
xcclRedOp_t toXcclOp(const char* op, const c10d::ReduceOp& r, at::ScalarType t);
// The PREMUL_SUM factor as a one-element CPU tensor of `dtype` (a host value of the type).
at::Tensor premulFactor(const char* op, const c10d::ReduceOp& r, at::ScalarType dtype);
void checkTensor(const char* op, const at::Tensor& t, const char* what = "tensor");
// All tensors on one device and of one dtype.
void checkSame(const char* op, const at::Tensor& ref, const at::Tensor& t);
const at::Tensor& single(const char* op, const std::vector<at::Tensor>& ts,
                         const char* what = "tensor");
void checkRank(const char* op, int64_t r, int size, const char* what);
void checkList(const char* op, const std::vector<at::Tensor>& list, const at::Tensor& ref, int size,
               const char* what);
// A list of one tensor per rank of ref's device and dtype, whose sizes may differ (the uneven
// all_gather and reduce_scatter); the tensor at `rank` must have ref's numel. True when the
// sizes differ.
bool checkUnevenList(const char* op, const std::vector<at::Tensor>& list, const at::Tensor& ref,
                     int size, int rank, const char* what);
// Element counts and prefix-sum displacements of a list, for the v-collectives.
inline void countsAndDispls(const std::vector<at::Tensor>& list, std::vector<size_t>* counts,
                            std::vector<size_t>* displs, size_t* total) {
  *total = 0;
  for (const auto& t : list) {
    counts->push_back(static_cast<size_t>(t.numel()));
    displs->push_back(*total);
    *total += static_cast<size_t>(t.numel());
  }
}

// ---- staging
// A contiguous buffer for `t`: t itself, or a contiguous copy (copy back in the post step).
inline at::Tensor contig(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

// Post step that copies staged buffers back into the caller's tensors.
struct CopyBack {
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;  // (destination, staged source)
  void add(const at::Tensor& dst, const at::Tensor& src) {
    if (!dst.is_same(src)) pairs.emplace_back(dst, src);
  }
  std::function<void()> fn() {
    if (pairs.empty()) return nullptr;
    auto p = std::move(pairs);
    // On xdev the copies are queued on the communication stream (launch runs this there).
    return [p]() {
      for (const auto& d : p) d.first.copy_(d.second.view(d.first.sizes()));
    };
  }
};

// Groups several enqueues into one (xcclGroupStart/End; nests inside a coalescing block).
xcclResult_t grouped(const std::function<xcclResult_t()>& body);

// ---- store adapter: xcclStore_t callbacks over a c10d Store
// The c10d Store behind libxccl's rendezvous (xcclStore_t). Each store call runs on a thread
// of its own and is given up after TORCH_XCCL_STORE_CALL_TIMEOUT_MS (10 s): torch's TCPStore
// client reads its replies without a timeout, so a store whose host is cut off (no reset)
// would hold the rank for as long as TCP retries, many minutes, past every deadline.
// Runs fn on a thread of its own and waits at most `ms` for it: false when it did not finish
// in time (the thread is left to finish or stay blocked on its own, so fn must own what it
// uses); an exception of fn is rethrown.
bool callBounded(std::function<void()> fn, int64_t ms);
struct StoreCtx {
  c10::intrusive_ptr<c10d::Store> store;
  int64_t callTimeoutMs = envKnob("TORCH_XCCL_STORE_CALL_TIMEOUT_MS", 10000, 1, INT64_MAX / 2);
};
int storeSet(void* ctx, const char* key, const void* value, size_t len);
int storeGet(void* ctx, const char* key, void* value, size_t cap, size_t* len, int64_t timeout_ms);

}  // namespace torch_xccl
