// FlightRecorder.cpp — the ring of recent operations and its state changes (the header says
// how "started" is derived and what the times mean).
#include "FlightRecorder.hpp"

#include "Utils.hpp"

#include <chrono>
#include <cstdlib>

#include <c10/util/Exception.h>

namespace torch_xccl {

namespace {

constexpr size_t kDefaultCapacity = 2000;  // as TORCH_NCCL_TRACE_BUFFER_SIZE's

size_t capacityFromEnv() {
  // entries kept; 0 disables the flight recorder
  return static_cast<size_t>(
      envKnob("TORCH_XCCL_TRACE_BUFFER_SIZE", kDefaultCapacity, 0, 10000000));
}

bool terminal(FlightState s) {
  return s == FlightState::kCompleted || s == FlightState::kFailed || s == FlightState::kTimedOut;
}

std::string errorText(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

const char* flightStateName(FlightState s) {
  switch (s) {
    case FlightState::kScheduled:
      return "scheduled";
    case FlightState::kStarted:
      return "started";
    case FlightState::kCompleted:
      return "completed";
    case FlightState::kFailed:
      return "failed";
    case FlightState::kTimedOut:
      return "timed_out";
  }
  return "unknown";
}

int64_t flightNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* flightDtypeName(c10::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(t);
  }
}

FlightRecorder& FlightRecorder::get() {
  static FlightRecorder* recorder = new FlightRecorder(capacityFromEnv());  // never freed
  return *recorder;
}

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity), ring_(capacity) {}

uint32_t FlightRecorder::addGroup(FlightGroup group) {
  std::lock_guard<std::mutex> g(mu_);
  // A group made again under a used name (destroyed, then created anew) gets a suffix, so
  // its numbering, which starts over, is not mixed with the old one's. Every rank makes its
  // groups in the same order, so the suffixes agree across ranks.
  int same = 0;
  for (const auto& old : groups_) {
    if (old.name == group.name || old.name.rfind(group.name + "@", 0) == 0) ++same;
  }
  if (same > 0) group.name += "@" + std::to_string(same + 1);
  groups_.push_back(std::move(group));
  lastOnComm_.resize(groups_.size() * 2, 0);
  return static_cast<uint32_t>(groups_.size() - 1);
}

FlightEntry* FlightRecorder::find(uint64_t id) {
  if (id == 0 || capacity_ == 0) return nullptr;
  FlightEntry& e = ring_[(id - 1) % capacity_];
  return e.id == id ? &e : nullptr;
}

uint64_t FlightRecorder::record(const FlightIssue& issue) {
  if (capacity_ == 0) return 0;
  const int64_t now = flightNowNs();
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t id = ++lastId_;
  FlightEntry& e = ring_[(id - 1) % capacity_];
  e.id = id;
  e.group = issue.group;
  e.onDevice = issue.onDevice;
  e.p2p = issue.p2p;
  e.seq = issue.seq;
  e.opSeq = issue.opSeq;
  e.op = issue.op;
  e.device = issue.device;
  e.timeoutMs = issue.timeoutMs;
  e.tEnqueued = now;
  e.tStarted = 0;
  e.tEnded = 0;
  e.error.clear();
  // clear() keeps the capacity: a warm slot does not allocate
  e.dims.clear();
  e.ndims.clear();
  e.dtypes.clear();
  e.nInputs = static_cast<uint32_t>(issue.inputs.size());
  for (const auto* list : {&issue.inputs, &issue.outputs}) {
    for (const at::Tensor& t : *list) {
      if (!t.defined()) {
        e.ndims.push_back(0);
        e.dtypes.push_back(c10::ScalarType::Undefined);
        continue;
      }
      auto sizes = t.sizes();
      e.ndims.push_back(static_cast<uint8_t>(sizes.size()));
      e.dims.insert(e.dims.end(), sizes.begin(), sizes.end());
      e.dtypes.push_back(t.scalar_type());
    }
  }
  // Started at once unless the communicator's previous operation is still under way.
  uint64_t& last = lastOnComm_[issue.group * 2 + (issue.onDevice ? 1 : 0)];
  FlightEntry* prev = find(last);
  e.prevOnComm = prev != nullptr ? last : 0;
  e.nextOnComm = 0;
  if (prev == nullptr || prev->state == FlightState::kCompleted) {
    e.state = FlightState::kStarted;
    e.tStarted = now;
  } else {
    e.state = FlightState::kScheduled;
    prev->nextOnComm = id;
  }
  last = id;
  return id;
}

void FlightRecorder::end(FlightEntry& e, FlightState state, int64_t now) {
  e.state = state;
  e.tEnded = now;
}

bool FlightRecorder::retire(uint64_t id, const std::exception_ptr& error, bool timedOut) {
  if (id == 0 || capacity_ == 0) return false;
  const std::string text = error ? errorText(error) : std::string();
  const int64_t now = flightNowNs();
  std::lock_guard<std::mutex> g(mu_);
  FlightEntry* e = find(id);
  if (e == nullptr || terminal(e->state)) return false;
  if (error) {
    end(*e, timedOut ? FlightState::kTimedOut : FlightState::kFailed, now);
    e->error = text;
    return true;
  }
  // In issue order: what ran before it on its communicator completed too (observed now).
  for (FlightEntry* p = find(e->prevOnComm); p != nullptr && !terminal(p->state);
       p = find(p->prevOnComm)) {
    end(*p, FlightState::kCompleted, now);
  }
  end(*e, FlightState::kCompleted, now);
  FlightEntry* next = find(e->nextOnComm);
  if (next != nullptr && next->state == FlightState::kScheduled) {
    next->state = FlightState::kStarted;
    next->tStarted = now;
  }
  return true;
}

FlightSnapshot FlightRecorder::snapshot() const {
  FlightSnapshot s;
  s.capacity = capacity_;
  s.tNow = flightNowNs();
  std::lock_guard<std::mutex> g(mu_);
  s.recorded = lastId_;
  s.groups = groups_;
  if (capacity_ == 0) return s;
  const uint64_t first = lastId_ > capacity_ ? lastId_ - capacity_ + 1 : 1;
  s.entries.reserve(static_cast<size_t>(lastId_ - first + 1));
  for (uint64_t id = first; id <= lastId_; ++id) s.entries.push_back(ring_[(id - 1) % capacity_]);
  return s;
}

std::vector<FlightGroup> FlightRecorder::groups() const {
  std::lock_guard<std::mutex> g(mu_);
  return groups_;
}

}  // namespace torch_xccl
