#include "Utils.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <c10/util/Exception.h>

namespace torch_xccl {

// ---------------------------------------------------------------- environment knobs
// Every knob is read when a process group is created, so tests can vary it per group.
int64_t envKnob(const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  while (end != nullptr && (*end == ' ' || *end == '\t' || *end == '\n')) ++end;
  const bool whole = end != v && end != nullptr && *end == '\0' && errno != ERANGE;
  TORCH_CHECK_VALUE(whole && n >= lo && n <= hi, "xccl: ", name, "='", v, "' is not ",
                    whole ? "in range" : "an integer", ": expected an integer from ", lo, " to ",
                    hi, " (unset: ", dflt, "; docs/ENV.md)");
  return n;
}
bool blockingWaitFromEnv() { return envKnob("TORCH_XCCL_BLOCKING_WAIT", 0, 0, 1) != 0; }
AsyncErrorMode errorModeFromEnv() {
  return static_cast<AsyncErrorMode>(envKnob("TORCH_XCCL_ASYNC_ERROR_HANDLING", 2, 0, 3));
}

// ---------------------------------------------------------------- errors
std::exception_ptr distError(const std::string& msg) {
  try {
    C10_THROW_ERROR(DistBackendError, msg);
  } catch (...) {
    return std::current_exception();
  }
}
[[noreturn]] void throwDist(const std::string& msg) { C10_THROW_ERROR(DistBackendError, msg); }

std::string libError(xcclResult_t r, const char* detail) {
  std::string s = xcclGetErrorString(r);
  if (detail != nullptr && *detail != '\0') s += std::string(": ") + detail;
  return s;
}

std::string callError(xcclComm_t comm) {
  std::string s = xcclGetLastError(nullptr);
  return s.empty() ? std::string(xcclGetLastError(comm)) : s;
}

// "allreduce(Float, 1048576)": the op and its first staged tensor, for the desync report.
std::string describeCall(const char* opName, const std::vector<at::Tensor>& tensors) {
  std::ostringstream os;
  os << opName << "(";
  if (!tensors.empty() && tensors[0].defined()) {
    os << tensors[0].scalar_type() << ", " << tensors[0].numel();
    if (tensors.size() > 1) os << ", +" << tensors.size() - 1 << " tensors";
  }
  os << ")";
  return os.str();
}

// ---------------------------------------------------------------- argument checks
xcclDataType_t toXcclType(const char* op, at::ScalarType t) {
  switch (t) {
    case at::kChar:
      return xcclInt8;
    case at::kByte:
      return xcclUint8;
    case at::kInt:
      return xcclInt32;
    case at::kLong:
      return xcclInt64;
    case at::kHalf:
      return xcclFloat16;
    case at::kFloat:
      return xcclFloat32;
    case at::kDouble:
      return xcclFloat64;
    case at::kBFloat16:
      return xcclBfloat16;
    case at::kBool:
      return xcclBool;
    case at::kFloat8_e4m3fn:
      return xcclFloat8e4m3;
    case at::kFloat8_e5m2:
      return xcclFloat8e5m2;
    case at::kUInt16:
      return xcclUint16;
    case at::kUInt32:
      return xcclUint32;
    case at::kUInt64:
      return xcclUint64;
    default:
      TORCH_CHECK(false, "xccl ", op, ": unsupported dtype ", t,
                  " (supported: float32, float64, float16, bfloat16, float8_e4m3fn, float8_e5m2, "
                  "int8, uint8, uint16, uint32, int32, uint64, int64, bool)");
  }
}

bool isFloating(at::ScalarType t) {
  return t == at::kHalf || t == at::kFloat || t == at::kDouble || t == at::kBFloat16 ||
         t == at::kFloat8_e4m3fn || t == at::kFloat8_e5m2;
}

xcclRedOp_t toXcclOp(const char* op, const c10d::ReduceOp& r, at::ScalarType t) {
  switch (r.op_) {
    case c10d::ReduceOp::SUM:
      return t == at::kBool ? xcclMax : xcclSum;  // bool sum = or
    case c10d::ReduceOp::PRODUCT:
      return t == at::kBool ? xcclMin : xcclProd;  // = and
    case c10d::ReduceOp::MIN:
      return xcclMin;
    case c10d::ReduceOp::MAX:
      return xcclMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(t != at::kBool, "xccl ", op, ": ReduceOp.AVG is not supported for bool");
      return xcclAvg;
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK(isFloating(t), "xccl ", op,
                  ": ReduceOp.PREMUL_SUM needs a floating-point dtype, got ", t);
      return xcclPremulSum;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(!isFloating(t), "xccl ", op,
                  ": bitwise ReduceOp needs an integer or bool "
                  "dtype, got ",
                  t);
      return r.op_ == c10d::ReduceOp::BAND  ? xcclBand
             : r.op_ == c10d::ReduceOp::BOR ? xcclBor
                                            : xcclBxor;
    default:
      TORCH_CHECK(false, "xccl ", op, ": unsupported ReduceOp ", static_cast<int>(r.op_));
  }
}

// The PREMUL_SUM factor as a one-element CPU tensor of `dtype` (a host value of the type).
at::Tensor premulFactor(const char* op, const c10d::ReduceOp& r, at::ScalarType dtype) {
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(r.supplement_.get());
  TORCH_CHECK(s != nullptr, "xccl ", op, ": PREMUL_SUM without a factor");
  if (s->tensor_factor.defined()) {
    return s->tensor_factor.detach().to(at::kCPU, dtype).reshape({1}).contiguous();
  }
  return at::full({1}, s->double_factor, at::TensorOptions().dtype(dtype));
}

void checkTensor(const char* op, const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "xccl ", op, ": ", what, " is undefined");
  TORCH_CHECK(t.layout() == at::kStrided, "xccl ", op, ": ", what,
              " must be a dense (strided) tensor, got layout ", t.layout());
  TORCH_CHECK(t.device().is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1 ||
                  t.device().is_cuda(),
              "xccl ", op, ": tensors must be on the cpu, xdev or cuda device, got ", t.device());
  toXcclType(op, t.scalar_type());
}

// All tensors on one device and of one dtype.
void checkSame(const char* op, const at::Tensor& ref, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "xccl ", op, ": a tensor is undefined");
  TORCH_CHECK(t.device() == ref.device(), "xccl ", op, ": tensors must be on the same device, got ",
              ref.device(), " and ", t.device());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "xccl ", op,
              ": tensors must have the same dtype, got ", ref.scalar_type(), " and ",
              t.scalar_type());
}

const at::Tensor& single(const char* op, const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "xccl ", op, ": expected exactly one ", what,
              " per process (one device per rank), got ", ts.size());
  checkTensor(op, ts[0]);
  return ts[0];
}

void checkRank(const char* op, int64_t r, int size, const char* what) {
  TORCH_CHECK(r >= 0 && r < size, "xccl ", op, ": invalid ", what, " ", r, " (group size is ", size,
              ")");
}

void checkList(const char* op, const std::vector<at::Tensor>& list, const at::Tensor& ref, int size,
               const char* what) {
  TORCH_CHECK(static_cast<int>(list.size()) == size, "xccl ", op, ": ", what,
              " must hold one tensor per rank (", size, "), got ", list.size());
  for (const auto& t : list) {
    checkSame(op, ref, t);
    TORCH_CHECK(t.numel() == ref.numel(), "xccl ", op, ": every tensor in ", what, " must have ",
                ref.numel(), " elements (like the input), got ", t.numel());
  }
}

bool checkUnevenList(const char* op, const std::vector<at::Tensor>& list, const at::Tensor& ref,
                     int size, int rank, const char* what) {
  TORCH_CHECK(static_cast<int>(list.size()) == size, "xccl ", op, ": ", what,
              " must hold one tensor per rank (", size, "), got ", list.size());
  bool uneven = false;
  for (const auto& t : list) {
    checkSame(op, ref, t);
    uneven = uneven || t.numel() != ref.numel();
  }
  TORCH_CHECK(!uneven || list[rank].numel() == ref.numel(), "xccl ", op, ": tensor ", rank, " of ",
              what, " (this rank's) must have as many elements as the one it pairs with (",
              ref.numel(), "), got ", list[rank].numel());
  return uneven;
}

// Groups several enqueues into one (xcclGroupStart/End; nests inside a coalescing block).
xcclResult_t grouped(const std::function<xcclResult_t()>& body) {
  xcclResult_t r = xcclGroupStart();
  if (r != xcclSuccess) return r;
  xcclResult_t r1 = body();
  xcclResult_t r2 = xcclGroupEnd();
  return r1 != xcclSuccess ? r1 : r2;
}

// ---------------------------------------------------------------- store adapter

// Runs fn on a thread of its own and waits at most `ms` for it. Returns false when fn did not
// finish in time: the thread is then left to finish, or to stay blocked, on its own (it holds
// what it uses: fn owns the store and its results through shared pointers). An exception of
// fn is rethrown here.
bool callBounded(std::function<void()> fn, int64_t ms) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  auto st = std::make_shared<State>();
  std::thread([st, fn = std::move(fn)]() mutable {
    std::exception_ptr error;
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> g(st->mu);
    st->done = true;
    st->error = error;
    st->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lk(st->mu);
  if (!st->cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return st->done; })) return false;
  if (st->error) std::rethrow_exception(st->error);
  return true;
}

namespace {

std::runtime_error unanswered(const StoreCtx& c, const char* what, const char* key) {
  return std::runtime_error(std::string("the store did not answer ") + what + "(" + key +
                            ") within " + std::to_string(c.callTimeoutMs) +
                            " ms (TORCH_XCCL_STORE_CALL_TIMEOUT_MS): its host (MASTER_ADDR, "
                            "rank 0's) is unreachable or stopped");
}

}  // namespace

int storeSet(void* ctx, const char* key, const void* value, size_t len) {
  auto* c = static_cast<StoreCtx*>(ctx);
  try {
    const auto* p = static_cast<const uint8_t*>(value);
    auto store = c->store;
    std::string k = key;
    std::vector<uint8_t> v(p, p + len);
    if (!callBounded([store, k, v] { store->set(k, v); }, c->callTimeoutMs)) {
      throw unanswered(*c, "set", key);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[torch_xccl] store set(%s) failed: %s\n", key, e.what());
    return 1;
  }
}

int storeGet(void* ctx, const char* key, void* value, size_t cap, size_t* len, int64_t timeout_ms) {
  try {
    auto* c = static_cast<StoreCtx*>(ctx);
    auto store = c->store;
    const std::string k = key;
    if (timeout_ms >= 0) {
      // libxccl waits in short slices (to see its deadline and abort flag). A Store::wait
      // with a timeout makes torch's TCPStore log two warnings per expiry, a flood while a
      // peer is late: poll with check(), which never waits, instead.
      auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      auto present = std::make_shared<bool>(false);
      for (;;) {
        if (!callBounded([store, k, present] { *present = store->check({k}); }, c->callTimeoutMs)) {
          throw unanswered(*c, "check", key);
        }
        if (*present) break;
        auto now = std::chrono::steady_clock::now();
        if (now >= end) return 1;  // a bounded wait ran out: libxccl asks again, no log
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
            std::chrono::milliseconds(10), end - now));
      }
    } else {
      c->store->wait({key});
    }
    auto got = std::make_shared<std::vector<uint8_t>>();
    if (!callBounded([store, k, got] { *got = store->get(k); }, c->callTimeoutMs)) {
      throw unanswered(*c, "get", key);
    }
    std::vector<uint8_t>& v = *got;
    *len = v.size();
    std::memcpy(value, v.data(), std::min(cap, v.size()));
    return 0;
    // Anything thrown means the store failed (e.g. its host process exited: broken pipe):
    // 2, which libxccl fails on at once (1 would be a timeout it waits through).
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "[torch_xccl] store get(%s) failed: %s\n", key,
                 e.what_without_backtrace());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[torch_xccl] store get(%s) failed: %s\n", key, e.what());
    return 2;
  }
}

}  // namespace torch_xccl
