// The communicator: connections, topology, and one progress thread that runs enqueued
// operations in order.
//
//   caller thread                     progress thread
//   -------------                     ---------------
//   enqueue(op) -> id  ------------>  pop op; wait for its inputs on the device stream
//   event = {comm, id}                run collectives (runCollective) in issue order,
//   query(id) / wait(id)  <--------   then post all of its sends/recvs and wait; publish id
//
//   runOnCaller(op) (XCCL_STREAM_CALLER): the op takes its place in the queue, the caller
//   waits for the ops before it, then runs it itself: no hand-off in either direction (for
//   small operations that hand-off is most of the time). One op executes at a time, on
//   whichever thread, so the engine is never shared.
//
// The first failure (timeout, dead peer, mismatch, abort) is sticky: it is recorded as
// the async error, every connection is closed so that peers fail fast too, and every
// later operation fails at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algorithms/exchange.h"
#include "collectives/bootstrap/bootstrap.h"
#include "collectives/topology/topology.h"
#include "common/param.h"
#include "heartbeat.h"
#include "windows.h"
#include "xccl.h"

namespace xccl {

class Device;

// One queue entry: the collectives of a call (or a group) and its point-to-point ops.
struct OpEntry {
  uint64_t id = 0;
  std::vector<CollArgs> colls;
  std::vector<CollArgs> p2p;
  xcclStream_t stream = nullptr;  // the caller's stream (device communicators)
  void* streamToken = nullptr;    // the stream's work before the op (Device::streamCapture)
  void* holdToken = nullptr;      // the stream's work after it waits on this (streamHold)
  bool onCaller = false;          // XCCL_STREAM_CALLER: its caller runs it (runOnCaller)
  // A window's put, signal or wait (windows.h) on a device communicator: run in queue order,
  // after the stream's earlier work, by the thread that runs the op; no colls or p2p then.
  std::function<void()> oneSided;
};

// For a device that stages through host memory (Device::stagesThroughHost): on the
// enqueuing thread, queues the copies of op's inputs into pinned host memory on op.stream,
// names the copies of its outputs back for the hold, and moves op's buffers onto the host
// copy (stage.cc).
// `engine` (the host device) provides the host memory.
void stageOperation(Device& device, Device& engine, int rank, int nranks, OpEntry& op);

// The deadline of every operation and of communicator creation (docs/ENV.md).
XCCL_PARAM(TimeoutMs, "TIMEOUT_MS", 30LL * 60 * 1000, 1, kKnobMax)
// A communicator's timeout in ms: config->timeout_ms when set (> 0), else XCCL_TIMEOUT_MS.
// config may be NULL (no config).
int64_t timeoutMsOf(const xcclConfig_t* config);
// The caller's config as this library's struct: the fields its header had (config->size, for
// one made by XCCL_CONFIG_INITIALIZER), the others at their defaults; NULL: the defaults
// (device -1). The copy is what a communicator keeps.
xcclConfig_t readConfig(const xcclConfig_t* config);

class Comm {
 public:
  // Rendezvous through `store`, connect to every peer, start the progress thread. `watch`
  // (made from a parent's members) fails the rendezvous early when a member is gone.
  // `cancel` (may be null; a non-blocking creation's), set by another thread, ends the
  // rendezvous as an abort would.
  Comm(Store& store, int rank, int nranks, const std::string& secret, const xcclConfig_t& config,
       const MemberWatch* watch = nullptr, const std::atomic<bool>* cancel = nullptr);
  ~Comm();  // destroy(): drains the queue (bounded by the timeout), then frees everything

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  Device& device() { return *device_; }
  bool deviceSupports(xcclDataType_t dtype) const;  // Device::supportsType
  const char* deviceName() const;
  int64_t timeoutMs() const { return timeoutMs_; }
  const CommTopology& topology() const { return topo_; }
  std::string describe() const;
  // Connections, shared memory, descriptors and threads on this rank (xcclCommGetStats).
  xcclCommStats_t stats();
  // What it is (xcclCommQueryProperties): every field of the library's struct.
  xcclCommProperties_t properties() const;

  // Returns the op's id. Throws the sticky error if the communicator has failed.
  uint64_t enqueue(OpEntry op);
  // XCCL_STREAM_CALLER (host communicators): runs op on the calling thread once every
  // operation enqueued before it is done, without waking the progress thread, and returns
  // its id, complete (query() gives its outcome). Throws the sticky error as enqueue() does.
  // op is run in place, not taken: the caller may reuse its lists' storage afterwards.
  uint64_t runOnCaller(OpEntry& op);
  // runOnCaller() for the library's own host-memory operations on any communicator (a
  // window registration's exchanges on a device communicator): no stream is involved.
  uint64_t runHere(OpEntry& op);
  uint64_t lastEnqueued() const { return enqueued_.load(); }
  // xcclSuccess, xcclInProgress, or the error that failed op `id`.
  xcclResult_t query(uint64_t id) const;
  // Waits up to timeoutMs (< 0: the communicator's timeout).
  xcclResult_t wait(uint64_t id, int64_t timeoutMs);
  // When op `id` (complete) completed, steady-clock ns; -1 when it completed more than
  // kDoneTimes operations ago (xcclEventElapsedTime).
  static constexpr uint64_t kDoneTimes = 4096;
  int64_t doneNs(uint64_t id) const;

  // Fails every pending and later operation at once (their waits return); safe from any
  // thread, also while others use the communicator. The destructor still frees it.
  void abort();
  // abort() that tells the peers why: each connection carries the note "rank r revoked the
  // communicator" before it closes, so every peer's pending or next operation fails at once
  // naming the revocation. The communicator can still be split or shrunk (derive.h).
  void revoke();

  // What the derivations (core/derive.h: split, shrink, probe) need of their parent.
  const std::vector<PeerInfo>& peers() const { return peers_.peers; }
  // The key scope of this communicator's records (recordScope of its secret): a child's
  // rendezvous lives under it, so it never meets another communicator's.
  const std::string& scope() const { return scope_; }
  // The configuration it was made with (name: name()).
  const xcclConfig_t& config() const { return config_; }
  const std::string& name() const { return name_; }
  // The number of the next derivation (split or shrink): every member calls them in the
  // same order, so the numbers agree.
  uint64_t nextDerivation() { return derivations_.fetch_add(1); }
  xcclResult_t asyncError() const { return asyncError_.load(); }
  std::string lastError() const;

  // xcclCommRegister / xcclCommDeregister (core/api_mem.cc): the buffers registered with this
  // communicator, disjoint, by first byte; each with its handle (the address of its entry).
  struct Registered {
    const char* base = nullptr;
    size_t bytes = 0;
  };
  struct Registry {
    std::mutex mu;
    std::map<const char*, std::unique_ptr<Registered>> buffers;
  };
  Registry& registry() { return registry_; }
  // Its windows and signal pad (core/windows.h), made at the first window registration.
  Windows& windows();

 private:
  void progressLoop();
  // Runs a popped op (the caller of runOnCaller or the progress thread), then publishes it.
  void execute(OpEntry& op);
  void runOp(OpEntry& op);
  // The progress thread's point-to-point runs: op and the point-to-point ops queued behind
  // it on the engine at once, each published as soon as it and every earlier one are done.
  void executeP2P(OpEntry& op);
  // Posts the messages of a point-to-point op (its sends to itself copied at once).
  void postP2POp(const OpEntry& op);
  // Runs fn; an exception fails the communicator (fail()) instead of leaving.
  void guarded(const std::function<void()>& fn);
  // Publishes op as done (or failed: query() tells); endsTurn also ends the running turn.
  void finish(OpEntry& op, bool endsTurn);
  // Ends the running turn (running_): the next op may start, on a caller or this thread.
  void endTurn();
  void endTurnLocked();  // the same, mu_ held
  void fail(xcclResult_t code, const std::string& msg);
  void closeConnections();
  // Leaves `why` where peers that never connected to this rank will read it (fail()).
  void noteUnconnected(const std::string& why);
  // Exchange's connector: the connection with a peer reached on first use (PeerSetup).
  Connection* connectOnFirstUse(int peer);

  int rank_, nranks_;
  int64_t timeoutMs_;
  int64_t waitSpin_;       // XCCL_WAIT_SPIN
  int64_t streamingFrom_;  // XCCL_STREAMING_STORE_BYTES
  std::string name_;
  xcclConfig_t config_;
  std::string scope_;
  std::atomic<uint64_t> derivations_{0};
  Device* device_;
  // What the engine and the transports run on: device_, or the host device when device_
  // stages operations through host memory (Device::stagesThroughHost).
  Device* engine_;
  PeerSetup peers_;
  CommTopology topo_;
  std::atomic<bool> abort_{false};
  std::unique_ptr<Exchange> exchange_;
  bool yieldWhenIdle_ = false;  // XCCL_YIELD_WHEN_IDLE, decided at creation
  std::unique_ptr<Heartbeat> heartbeat_;
  uint64_t collSeq_ = 0;  // progress thread only

  mutable std::mutex mu_;
  // Guards peers_.connections once the engine may add to it (connectOnFirstUse) while other
  // threads close or note them; closed_: no more connections after closeConnections().
  std::mutex connMu_;
  bool closed_ = false;
  std::condition_variable workCv_, doneCv_;
  std::deque<OpEntry> queue_;
  std::atomic<bool> stop_{false};
  bool workerSleeping_ = false;
  bool running_ = false;             // an op is executing (on the progress thread or a caller's)
  std::atomic<bool> p2pRun_{false};  // executeP2P is taking later ops: enqueue rings the bell
  std::atomic<uint64_t> enqueued_{0}, completed_{0};
  // When the last kDoneTimes operations completed, by id % kDoneTimes: id first, then the
  // time; written in finish() under mu_ (one writer), read lock-free (doneNs).
  struct DoneTime {
    std::atomic<uint64_t> id{0};
    std::atomic<int64_t> ns{0};
  };
  std::unique_ptr<DoneTime[]> doneTimes_{new DoneTime[kDoneTimes]};
  std::atomic<uint64_t> failedFrom_{UINT64_MAX};  // first op id that failed
  std::atomic<xcclResult_t> asyncError_{xcclSuccess};
  std::string errorMsg_;  // guarded by mu_
  std::thread worker_;
  // A failure's note to the higher TCP peers never connected (they wait for us to connect:
  // tcp/lazy.cc); joined by the destructor.
  std::thread noteThread_;
  Registry registry_;
  std::mutex windowsMu_;
  std::unique_ptr<Windows> windows_;
};

}  // namespace xccl
