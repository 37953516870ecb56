// Shared by the collectives suites: typed buffers, deterministic inputs, a host reference
// for every dtype x op with the library's semantics, and a world of thread-ranks that
// share one communicator per rank for many operations.
//
// Reference semantics (the same as the device kernels): one reduction step computes in
// double and rounds to the dtype (integers wrap, 16-bit floats round to nearest even, bool
// is 0/1), so folding small integers is exact in every type and independent of order.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/device/dtype.h"
#include "test_dtype.h"
#include "test_util.h"
#include "xccl.h"

namespace xccl_coll_test {

using Clock = std::chrono::steady_clock;
inline double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline const std::vector<xcclDataType_t>& allTypes() {
  static const std::vector<xcclDataType_t> v = {xcclFloat32,  xcclFloat64, xcclFloat16,
                                                xcclBfloat16, xcclInt8,    xcclUint8,
                                                xcclInt32,    xcclInt64,   xcclBool};
  return v;
}
inline const std::vector<xcclRedOp_t>& allOps() {
  static const std::vector<xcclRedOp_t> v = {xcclSum,       xcclProd, xcclMax, xcclMin, xcclAvg,
                                             xcclPremulSum, xcclBand, xcclBor, xcclBxor};
  return v;
}
// Which ops the library documents per dtype (checked against the library, not taken from it).
inline bool supported(xcclDataType_t t, xcclRedOp_t op) {
  bool isFloat = t == xcclFloat32 || t == xcclFloat64 || t == xcclFloat16 || t == xcclBfloat16;
  if (op == xcclBand || op == xcclBor || op == xcclBxor) return !isFloat;
  if (op == xcclAvg || op == xcclPremulSum) return t != xcclBool;
  return true;
}

using xccl_test::load;
using xccl_test::store;

// v rounded to what a value of type t can hold.
inline double roundTo(xcclDataType_t t, double v) {
  unsigned char b[8];
  store(b, 0, t, v);
  return load(b, 0, t);
}

// One reduction step with the library's semantics.
inline double applyOp(xcclRedOp_t op, xcclDataType_t t, double a, double b) {
  auto i64 = [](double x) { return static_cast<int64_t>(x); };
  switch (op) {
    case xcclSum:
    case xcclAvg:
    case xcclPremulSum:
      return roundTo(t, a + b);
    case xcclProd:
      return roundTo(t, a * b);
    case xcclMax:
      return a < b ? b : a;
    case xcclMin:
      return b < a ? b : a;
    case xcclBand:
      return roundTo(t, static_cast<double>(i64(a) & i64(b)));
    case xcclBor:
      return roundTo(t, static_cast<double>(i64(a) | i64(b)));
    case xcclBxor:
      return roundTo(t, static_cast<double>(i64(a) ^ i64(b)));
    default:
      return NAN;
  }
}

inline bool isIntegral(xcclDataType_t t) {
  return t == xcclInt8 || t == xcclUint8 || t == xcclInt32 || t == xcclInt64 || t == xcclBool;
}

// The premul-sum factor used by the tests: exact in every type.
inline double premulScalar(xcclDataType_t t) { return isIntegral(t) ? 3.0 : 0.5; }

// Input element j of `rank` for a reduction with op, already rounded to t. Small integers
// so that sums and products are exact in every type (at most 3 factors of 2 in a product
// over 8 ranks).
inline double reduceInput(xcclRedOp_t op, xcclDataType_t t, int rank, size_t j) {
  const long r = rank, i = static_cast<long>(j % 100003);
  double v;
  if (t == xcclBool) {
    v = (r + i) % 9 != 0;
  } else {
    switch (op) {
      case xcclProd: {
        static const double f[] = {1, 2, -1};
        v = f[(r + i) % 3];
        break;
      }
      case xcclMax:
      case xcclMin:
        v = static_cast<double>((r * 5 + i * 7) % 11 - 5);
        break;
      case xcclBand:
      case xcclBor:
      case xcclBxor:
        v = static_cast<double>((r * 37 + i * 11 + 5) % 128 - 64);
        break;
      default:
        v = static_cast<double>((r * 7 + i * 3) % 5 - 2);
        break;
    }
  }
  return roundTo(t, v);
}

// Expected element j of the reduction of reduceInput over ranks 0..n-1.
inline double reduceExpected(xcclRedOp_t op, xcclDataType_t t, int n, size_t j) {
  auto in = [&](int r) {
    double x = reduceInput(op, t, r, j);
    return op == xcclPremulSum ? roundTo(t, x * premulScalar(t)) : x;
  };
  double acc = in(0);
  for (int r = 1; r < n; ++r) acc = applyOp(op, t, acc, in(r));
  if (op == xcclAvg) acc = isIntegral(t) ? std::trunc(acc / n) : roundTo(t, acc / n);
  return acc;
}

// A value for data-movement collectives: distinct per (rank, index), exact in every type.
inline double pattern(int rank, size_t j, xcclDataType_t t) {
  return roundTo(t, static_cast<double>(static_cast<long>((rank * 131 + j * 7) % 97) - 48));
}

inline bool close(xcclDataType_t t, double got, double want) {
  if (isIntegral(t) || t == xcclFloat64) return got == want;
  double tol = t == xcclFloat32 ? 1e-6 : t == xcclFloat16 ? 2e-3 : 1e-2;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// A buffer of `count` elements of t in "device" memory (the host device's memory is RAM).
struct Buf {
  xcclDataType_t t;
  std::vector<unsigned char> bytes;
  Buf(xcclDataType_t type, size_t count) : t(type), bytes(count * xcclTypeSize(type) + 1) {}
  void* data() { return bytes.data(); }
  size_t count() const { return (bytes.size() - 1) / xcclTypeSize(t); }
  void set(size_t i, double v) { store(bytes.data(), i, t, v); }
  double get(size_t i) const { return load(bytes.data(), i, t); }
  void fill(double v) {
    for (size_t i = 0; i < count(); ++i) set(i, v);
  }
};

// Compares buf[first + i] against want(i) for i < n; reports the first few mismatches.
// Returns the number of mismatches.
inline size_t expectMatches(const Buf& buf, size_t first, size_t n,
                            const std::function<double(size_t)>& want, const std::string& what) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    double w = want(i), g = buf.get(first + i);
    if (!close(buf.t, g, w)) {
      if (++bad <= 3) {
        ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << w;
      }
    }
  }
  if (bad > 3) ADD_FAILURE() << what << ": " << bad << " mismatches in " << n << " elements";
  return bad;
}

// Waits for everything enqueued on comm so far; throws with the library's message.
// One rank of an n-rank host-memory communicator made through the unique id (the body of a
// runProcesses rank); throws as check() does.
inline xcclComm_t initHostRank(const xcclUniqueId& id, int n, int rank, int64_t timeoutMs = 60000) {
  xcclConfig_t cfg{};
  cfg.timeout_ms = timeoutMs;
  cfg.device = -1;
  xcclComm_t comm = nullptr;
  xccl_test::check(xcclCommInitRankConfig(&comm, n, id, rank, &cfg));
  return comm;
}

inline void waitAll(xcclComm_t comm, int64_t timeoutMs = -1) {
  xcclEvent_t ev;
  xccl_test::check(xcclEventRecord(&ev, comm), comm);
  xccl_test::check(xcclEventWait(&ev, timeoutMs), comm);
}

// n thread-ranks with one communicator each, kept for many operations. run(fn) runs fn on
// every rank and joins; between runs no operation is in flight, so the test may change
// environment knobs (XCCL_ALGO ...) without racing the progress threads.
class ThreadWorld {
 public:
  // hostOf(rank) non-empty gives rank a fake host identity (ranks on other "hosts" connect
  // over TCP and the ring groups ranks by host).
  explicit ThreadWorld(int n, std::function<std::string(int)> hostOf = nullptr,
                       int64_t timeoutMs = 60000);
  ~ThreadWorld();
  int size() const { return n_; }
  xcclComm_t comm(int rank) const { return comms_[rank]; }
  void run(const std::function<void(int rank, xcclComm_t comm)>& fn, int timeoutSec = 90);

 private:
  int n_;
  xccl_test::MemoryStore store_;
  std::vector<xcclComm_t> comms_;
};

}  // namespace xccl_coll_test
