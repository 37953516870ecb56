// FlightRecorder.hpp — the last N operations this process issued through xccl, as
// ProcessGroupNCCL's flight recorder keeps them for NCCL: per entry the group, the
// collective (or point-to-point) number, the op, the tensors' shapes and dtypes, the device,
// the state and its times, and the error of a failed op. What writes it to disk, and when,
// is FlightDump.{hpp,cpp}; docs/RELIABILITY.md ("Flight recorder") has the whole picture.
//
// States: scheduled -> started -> completed | failed | timed out. libxccl has no "started"
// event, so it is derived: the operations of one communicator run in issue order, so an
// operation has started once it is enqueued and its predecessor on that communicator has
// completed (at once when there is none). Completion is when the backend observed it (a
// wait, a query, the completion thread's sweep), and in order: an operation that completed
// means every earlier one on its communicator completed, so those are marked too. Every time
// is therefore an upper bound on the real one, late by at most the completion thread's sweep
// (20 ms) for Works nobody waits on.
//
// Cost: one mutex and no allocation per record once the ring is warm (each slot keeps its
// vectors' capacity); the ring is allocated when the recorder is made.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace torch_xccl {

enum class FlightState : uint8_t { kScheduled, kStarted, kCompleted, kFailed, kTimedOut };
const char* flightStateName(FlightState s);

// One process group as the dump names it.
struct FlightGroup {
  std::string name;  // unique in the process ("0", or "0@2" when "0" is made again)
  int rank = 0;      // this process's rank in the group
  int size = 0;
  std::vector<uint64_t> ranks;  // global rank of each group rank (empty: the default group)
  // where peers' dump requests meet (FlightDump.hpp); null for a recorder of its own
  c10::weak_intrusive_ptr<c10d::Store> store{c10::intrusive_ptr<c10d::Store>()};
};

// What launch() knows about one operation once libxccl has accepted it.
struct FlightIssue {
  uint32_t group = 0;     // FlightRecorder::addGroup's index
  bool onDevice = false;  // the group's device communicator, else its host one
  bool p2p = false;
  uint64_t seq = 0;     // collective number (p2p: the group's p2p number); 1, 2, ...
  uint64_t opSeq = 0;   // the backend's number for every op (Work's sequence number)
  const char* op = "";  // a string literal
  c10::Device device{c10::kCPU};
  int64_t timeoutMs = 0;
  c10::ArrayRef<at::Tensor> inputs;
  c10::ArrayRef<at::Tensor> outputs;
};

struct FlightEntry {
  uint64_t id = 0;  // 1, 2, ... per process; 0: an empty slot
  uint32_t group = 0;
  bool onDevice = false;
  bool p2p = false;
  uint64_t seq = 0;
  uint64_t opSeq = 0;
  const char* op = "";
  c10::Device device{c10::kCPU};
  int64_t timeoutMs = 0;
  FlightState state = FlightState::kScheduled;
  int64_t tEnqueued = 0;  // wall clock, ns since the epoch; 0: not (yet) known
  int64_t tStarted = 0;
  int64_t tEnded = 0;
  uint64_t prevOnComm = 0;  // the entry issued before / after it on its communicator
  uint64_t nextOnComm = 0;
  uint32_t nInputs = 0;        // tensors [0, nInputs) are inputs, the rest outputs
  std::vector<int64_t> dims;   // every tensor's sizes, one after the other
  std::vector<uint8_t> ndims;  // each tensor's number of dimensions
  std::vector<c10::ScalarType> dtypes;
  std::string error;  // failed / timed out: the error's text
};

// A consistent copy of the recorder, for a dump.
struct FlightSnapshot {
  size_t capacity = 0;
  uint64_t recorded = 0;  // entries ever recorded (more than capacity: the oldest were dropped)
  int64_t tNow = 0;
  std::vector<FlightGroup> groups;
  std::vector<FlightEntry> entries;  // oldest first
};

class FlightRecorder {
 public:
  // The process's recorder: TORCH_XCCL_TRACE_BUFFER_SIZE entries (default 2000, 0 disables),
  // read once, at the first use. Never destroyed (dumps may run while the process exits).
  static FlightRecorder& get();
  explicit FlightRecorder(size_t capacity);

  bool enabled() const { return capacity_ > 0; }
  size_t capacity() const { return capacity_; }
  // A new process group; entries refer to it by the returned index.
  uint32_t addGroup(FlightGroup group);
  // After libxccl accepted the operation, in the communicator's enqueue order. Returns the
  // entry's id (0 when disabled).
  uint64_t record(const FlightIssue& issue);
  // The operation ended: completed (no error), failed, or timed out. Returns false when the
  // entry is unknown (0, dropped from the ring) or had already ended.
  bool retire(uint64_t id, const std::exception_ptr& error, bool timedOut);
  FlightSnapshot snapshot() const;
  std::vector<FlightGroup> groups() const;

 private:
  FlightEntry* find(uint64_t id);
  static void end(FlightEntry& e, FlightState state, int64_t now);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  uint64_t lastId_ = 0;
  std::vector<FlightGroup> groups_;
  std::vector<uint64_t> lastOnComm_;  // [group * 2 + onDevice]: the last entry issued there
};

// Wall-clock time in ns since the epoch.
int64_t flightNowNs();
// "float32", "int64", ... (torch's names).
const char* flightDtypeName(c10::ScalarType t);

}  // namespace torch_xccl
