// Exchange: the progress engine algorithms are written against.
//
// An algorithm posts messages (send / recv / recvReduce to or from peers) and calls
// wait(), which progresses everything posted until done, concurrently across peers and
// directions, honouring the operation's deadline and the communicator's abort flag.
// Messages between two ranks in one direction match in posting order.
//
// Single copy between the processes of a host: a message of at least XCCL_PEER_READ_MIN
// bytes whose source the Device can export (xdev device memory) travels as a reference to
// the sender's buffer; the receiver copies or reduces straight out of it (one pass over the
// bytes instead of one into the ring and one out) and tells the sender, whose send completes
// then (frame.h, kFlagPeerRead).
//
// Framing (done here, not in the transports): every message is a 64-byte header
// {magic, op type, flags, sequence, payload bytes, the sender's call (dtype, op, root,
// count), check} followed by the payload padded to a multiple of 64 bytes, so a header never
// straddles a ring's end (rings are multiples of 64 bytes) and a window never splits an
// element. The receiver checks every header against its own call: kind (collective /
// point-to-point), sequence, collective, dtype, reduction op, root, element count and
// length. A mismatch means the ranks disagree on the operation; it fails the operation with
// both sides' calls in the message, never reading past the posted buffer.
//
// Desync check: every collective on two or more ranks also carries one header-only frame
// from each rank to its ring successor (postCheck()), so every rank compares its call with
// at least one other rank's even when the schedule gives it nothing to receive (a
// broadcast root, a gather leaf): when two ranks disagree, ranks on both sides of the
// disagreement fail with both calls named, instead of returning.
//
// A failing rank sends an abort frame carrying its error to every peer whose stream is at a
// frame boundary before it closes its connections, so a peer that fails because of it says
// why (the root cause), not only that the connection closed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collectives/algorithms/slot.h"
#include "collectives/transport/shm/doorbell.h"
#include "collectives/transport/transport.h"
#include "common/clock.h"
#include "xccl.h"

namespace xccl {

struct FrameTrailer;  // frame.h

class Device;

enum class CollType : uint16_t {
  kAllReduce = 1,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kAllToAllv,
  kGather,
  kScatter,
  kSend,
  kRecv,
  kRecvAny,
  kBarrier,
  kAllGatherv,      // recvcounts/rdispls: rank i's block; count: this rank's sendcount
  kReduceScatterv,  // recvcounts/sdispls: block p of sendbuf goes to rank p, reduced
};
constexpr CollType kLastCollType = CollType::kReduceScatterv;
// Collectives whose ranks move different amounts (counts in CollArgs' vectors): their
// signature carries no count, and a rank with nothing to move still takes part.
inline bool isVector(CollType t) {
  return t == CollType::kAllToAllv || t == CollType::kAllGatherv || t == CollType::kReduceScatterv;
}
const char* collName(CollType type);
inline bool isPointToPoint(CollType t) {
  return t == CollType::kSend || t == CollType::kRecv || t == CollType::kRecvAny;
}
inline bool isReduction(CollType t) {
  return t == CollType::kAllReduce || t == CollType::kReduce || t == CollType::kReduceScatter ||
         t == CollType::kReduceScatterv;
}
inline bool hasRoot(CollType t) {
  return t == CollType::kBroadcast || t == CollType::kReduce || t == CollType::kGather ||
         t == CollType::kScatter;
}

// Everything an algorithm may know about one call.
struct CollArgs {
  CollType type = CollType::kAllReduce;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;  // elements; per-rank block for allgather/reducescatter/alltoall/gather/scatter
  xcclDataType_t dtype = xcclFloat32;
  xcclRedOp_t op = xcclSum;
  int root = 0;  // broadcast/reduce/gather/scatter root; peer for send/recv
  std::vector<size_t> sendcounts, sdispls, recvcounts, rdispls;  // alltoallv, in elements
  unsigned char scalar[8] = {0};  // premul-sum factor, a value of dtype
  int* anyPeerOut = nullptr;      // recv-any: where the sender's rank goes
};

// What a rank called, as carried in every frame header and compared by the receiver.
// Fields that do not apply to a collective are normalised (op -1 outside reductions, root
// -1 without a root, count 0 for alltoallv and barrier) so that equal calls compare equal.
struct OpSignature {
  CollType type = CollType::kAllReduce;
  int dtype = -1;
  int op = -1;
  int root = -1;
  uint64_t count = 0;
  bool operator==(const OpSignature& o) const {
    return type == o.type && dtype == o.dtype && op == o.op && root == o.root && count == o.count;
  }
  bool operator!=(const OpSignature& o) const { return !(*this == o); }
};
OpSignature signatureOf(const CollArgs& args);
// "allreduce(float32, 1048576, sum)", "broadcast(float32, 8, root 0)", "barrier()".
std::string describeCall(const OpSignature& sig);

// The knobs the selector and the schedules read (select.cc, readTuning), read once when the
// engine is made: a knob set later applies to communicators made later, and the hot path of
// a small collective reads no environment.
struct Tuning {
  std::string algoSpec;             // XCCL_ALGO as given (for messages)
  std::vector<std::string> forced;  // by CollType: the algorithm XCCL_ALGO forces, or ""
  int64_t allreduceDirectMax = 0, broadcastDirectMax = 0, reduceDirectMax = 0,
          allgatherDirectMax = 0, reducescatterDirectMax = 0, twolevelMinHosts = 0,
          hierarchicalMin = 0, directTempMax = 0, recdoublingMinRanks = 0, rabenseifnerMinRanks = 0,
          rabenseifnerMax = 0, hierarchicalLogMinHosts = 0, foldchainMinRanks = 0;
  size_t ringSlice = 0, chainChunk = 0;  // bytes per message; SIZE_MAX: uncut
  // The largest allreduce the slot path takes (slot.h; 0: off): XCCL_SLOT_MAX, or by default
  // chosen by the communicator for its host (setSlotMax), alike on every rank of the host.
  size_t slotMax = 0;
  // XCCL_REPRODUCIBLE (or the communicator's config): reductions run only on algorithms
  // that fold in rank order (Algorithm::ordered).
  bool reproducible = false;
};
// Reads and checks every knob of the table (InvalidUsage for a bad XCCL_ALGO).
Tuning readTuning();
// With t.reproducible, InvalidUsage when t forces (XCCL_ALGO) a reduction algorithm that does
// not fold in rank order: at creation, instead of failing the first such operation.
void checkReproducible(const Tuning& t);

struct PendingMsg;   // defined in exchange_msg.h
struct FrameHeader;  // defined in frame.h
// A posted receive, for sendForward(). Valid until the wait() that completes it returns.
using MsgRef = std::shared_ptr<PendingMsg>;

class Exchange {
 public:
  Exchange(int rank, int nranks, Device& device, std::vector<Connection*> conns,
           std::vector<int> ringOrder, const std::atomic<bool>& abortFlag);
  ~Exchange();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  Device& device() { return device_; }
  const Device& device() const { return device_; }
  // For algorithms that wait outside the engine (slot.cc): the communicator's abort flag and
  // the current operation's deadline.
  bool aborted() const { return abort_.load(std::memory_order_relaxed); }
  const Deadline& deadline() const { return deadline_; }
  bool checksums() const { return checksum_; }
  // Whether buffers may be read in place by peers of this host (XCCL_PEER_READ, off with
  // XCCL_CHECKSUM): "mapped" runs only then.
  bool readsInPlace() const { return peerReadOn_; }
  // The communicator's slots for small allreduces on one host (algo::slotRun), once made.
  algo::SlotArea* slotArea() const { return slots_.get(); }
  void setSlotArea(algo::SlotAreaPtr area) {
    slots_ = std::move(area);
    slotsShared_.store(slots_.get(), std::memory_order_release);
  }
  // While this rank runs an operation that expects no frame from `peer` (a slot allreduce):
  // a frame at the head of its stream means the peer runs another operation (a desync: throws
  // the mismatch naming both calls) or failed (its abort frame: throws its reason).
  void checkQuietPeer(int peer);
  // The communicator failed (any thread): peers waiting on this rank's slots stop waiting.
  void markSlotsFailed(const std::string& why) {
    if (algo::SlotArea* a = slotsShared_.load(std::memory_order_acquire)) {
      algo::markSlotsFailed(*a, why);
    }
  }
  // A failure outside wait() (an algorithm that waits by itself): as wait() does, abort
  // frames to the peers and nothing left posted.
  void abandonOp(const std::string& why) { abandon(why); }
  // Ranks in ring order (ranks grouped by host); ringNext/ringPrev are neighbours of `rank`.
  const std::vector<int>& ring() const { return ring_; }
  int ringPos(int rank) const { return ringPos_[rank]; }
  int ringNext() const { return ring_[(ringPos_[rank_] + 1) % nranks_]; }
  int ringPrev() const { return ring_[(ringPos_[rank_] + nranks_ - 1) % nranks_]; }
  // The ranks of each host, each in ring order (topology/plan.h); by default one host.
  // Hierarchical schedules run along a host's ranks and across the hosts.
  void setHosts(std::vector<std::vector<int>> hosts);
  const std::vector<std::vector<int>>& hosts() const { return hosts_; }
  // Ranks outnumber this host's cores: a waiting engine yields its core from the first idle
  // poll instead of spinning (set by the communicator, XCCL_YIELD_WHEN_IDLE).
  void setYieldWhenIdle(bool on) { yieldWhenIdle_ = on; }
  void setSlotMax(size_t bytes) { tuning_.slotMax = bytes; }
  bool yieldWhenIdle() const { return yieldWhenIdle_; }
  int hostOf(int rank) const { return hostOf_[rank]; }
  const Tuning& tuning() const { return tuning_; }
  // The communicator's config overrides XCCL_REPRODUCIBLE (set before any operation);
  // InvalidUsage when XCCL_ALGO forces a reduction algorithm that cannot honour it.
  void setReproducible(bool on) {
    tuning_.reproducible = on;
    checkReproducible(tuning_);
  }

  // Device temporaries of one collective (algo::DeviceBuffer). They are kept and reused by
  // later collectives (within a budget, below): allocating small ones was a good part of a
  // small collective's host time, faulting in large ones a good part of a large one's.
  struct Scratch {
    char* ptr = nullptr;
    size_t capacity = 0;
  };
  Scratch takeScratch(size_t bytes);
  void giveScratch(const Scratch& s);
  // True the first time `key` is passed (the selector explains each choice once).
  bool firstTime(const std::string& key) { return explained_.insert(key).second; }

  // Called by the communicator before each operation (collSeq 0 for point-to-point).
  // streamingStores: the operation's output is too large to stay in cache, so receives that
  // nothing forwards are written with CopyKind::kStagingToDeviceNoReuse.
  void beginOp(const OpSignature& sig, uint64_t collSeq, const Deadline& deadline,
               bool streamingStores = false);
  // Posts the desync check of a collective: a header-only frame to the ring successor and
  // its counterpart from the ring predecessor (see the file comment). Call it first, before
  // the schedule's messages, on every rank.
  void postCheck();
  // Point-to-point ops of one group differ in dtype and count: the messages posted after
  // this carry `sig` (a collective's messages carry beginOp's).
  void setSignature(const OpSignature& sig) { sig_ = sig; }
  // Several operations on the engine at once (the communicator's point-to-point runs): each
  // message posted after this adds one to *left, and taking it off when it completes, so the
  // caller knows which operation is done. nullptr: stop counting.
  void countMessagesIn(int* left) { opCounter_ = left; }
  // The deadline of the oldest operation still running (replaces beginOp's).
  void setDeadline(const Deadline& deadline) { deadline_ = deadline; }
  // Whether bytes of completed sends still wait in this process to be handed to the wire
  // (a TCP peer that does not read): a send is not done before they leave.
  bool holdsBytes();

  // Posts a message of `bytes` bytes from device buffer src to peer.
  void send(int peer, const void* src, size_t bytes);
  // Posts receipt of a message of exactly `bytes` bytes from peer into device buffer dst.
  MsgRef recv(int peer, void* dst, size_t bytes);
  // Posts receipt that reduces: dst[i] = local[i] (op) incoming[i]. local may equal dst.
  MsgRef recvReduce(int peer, void* dst, const void* local, size_t count, xcclDataType_t dtype,
                    xcclRedOp_t op);
  // Posts a send of what `source` (a posted recv/recvReduce) writes into its dst, slice by
  // slice as it lands: a ring or chain forwards data while it is still in cache, and a whole
  // multi-step schedule can be posted at once and completed by a single wait().
  void sendForward(int peer, const MsgRef& source);
  // Posts receipt of a point-to-point message from any peer; *peerOut gets the sender.
  void recvAny(void* dst, size_t bytes, int* peerOut);
  // Progresses all posted messages until every one is complete. Throws Timeout,
  // RemoteError (peer gone, bad frame, mismatch) or InvalidUsage (abort).
  //
  // Waiting: while nothing moves it polls for up to an adaptive spin time (XCCL_SPIN_US at
  // most: longer after waits that spinning ended, shorter after waits it did not), then,
  // when every peer it waits on rings this rank's doorbell (shared memory), sleeps on the
  // doorbell until a peer moves bytes; otherwise it yields and naps (Backoff).
  //
  // more (optional): called after passes that moved something, when everything posted is
  // done, and every 64 idle passes; it may post further messages and returns whether it did
  // (wait then goes on until those are done too).
  void wait(const std::function<bool()>& more = {});
  // This rank's doorbell (null: none; the engine then never sleeps on one).
  void setDoorbell(shm::Doorbell* bell) { bell_ = bell; }
  // Makes the connection with a peer whose slot in `conns` was null, when a message to or
  // from it is first posted (connected on first use; transport/connect.cc). Without one, a
  // null slot is an error.
  void setConnector(std::function<Connection*(int)> connector) {
    connector_ = std::move(connector);
  }

 private:
  MsgRef newMsg();
  void retire(std::deque<MsgRef>& q);  // pops a completed message, keeping it for reuse
  static constexpr size_t kMaxSpare = 64;
  // One pass over every posted message; *busy: something is posted or bytes still wait to
  // leave. Returns whether anything moved.
  bool progressAll(bool* busy);
  // Sleeps on the doorbell until a peer moves bytes or timeoutUs passes; false (without
  // sleeping) when a last pass moved something or a posted peer does not ring the bell.
  bool sleepOnDoorbell(int64_t timeoutUs);
  // Whether send m to peer goes as a peer read (decided once per message; fills m.ref).
  bool viaPeerRead(int peer, PendingMsg& m);
  bool progressPeerReadSend(int peer, PendingMsg& m);
  bool progressSend(int peer);
  bool progressRecv(int peer);
  bool progressRecvAny();
  bool posted(int peer) const;
  void checkPeers();
  // `doing`: what this rank was doing with the peer, when the engine has nothing posted for it.
  [[noreturn]] void failPeerGone(int peer, const std::string& why, bool silent = false,
                                 const char* doing = nullptr);
  [[noreturn]] void failTimeout();
  void checkHeader(int peer, const PendingMsg& m, const FrameHeader& h) const;
  std::string abortReason(int peer);  // the peer's abort frame at the head of its stream, if any
  void sendAbortFrames(const std::string& why);
  void preferMismatch();  // throws the ring predecessor's mismatch if its frame shows one

  int rank_, nranks_;
  Device& device_;
  std::vector<Connection*> conns_;
  std::function<Connection*(int)> connector_;
  void connectTo(int peer);
  void abandon(const std::string& why);  // after a failure: abort frames, then nothing posted
  std::vector<int> ring_, ringPos_;
  std::vector<std::vector<int>> hosts_;
  std::vector<int> hostOf_;
  std::set<std::string> explained_;
  Tuning tuning_;
  const std::atomic<bool>& abort_;
  OpSignature sig_;
  uint64_t collSeq_ = 0;
  Deadline deadline_;
  std::vector<std::deque<MsgRef>> sends_, recvs_;
  MsgRef recvAny_;
  std::vector<MsgRef> spare_;  // completed messages, for newMsg()
  // Free temporaries, for takeScratch(): kept up to kMaxScratchKept of them and kScratchKept
  // bytes in all, so that a schedule's temporary of many MiB is not faulted in afresh on
  // every call (each 4 KiB page costs about 3 us here: a 64 MiB reduce chain's partials
  // took 20 % of its time in page faults when only temporaries up to 1 MiB were kept).
  std::vector<Scratch> scratch_;
  size_t scratchKept_ = 0;  // bytes in scratch_
  static constexpr size_t kScratchKept = size_t{256} << 20, kMaxScratchKept = 4;
  std::vector<uint64_t> p2pSent_, p2pRecvd_;  // per-peer point-to-point message counters
  // Peers whose connection may still hold bytes we committed (set when a send completes,
  // cleared once sendPending() says no), so idle connections are not polled.
  std::vector<char> mayHoldBytes_;
  // The peers with something posted or maybe held (an unordered list, and a flag per rank):
  // a pass of the engine visits these, not every rank, so its cost follows the schedule's
  // degree (log n for a tree) rather than the communicator's size. A posted recv-any makes
  // every peer a candidate; then passes visit all.
  std::vector<int> active_;
  std::vector<char> isActive_;
  void activate(int peer) {
    if (!isActive_[peer]) {
      isActive_[peer] = 1;
      active_.push_back(peer);
    }
  }
  // Calls fn(peer) for every peer a pass must visit (all but self while a recv-any is
  // posted), then drops from the list the peers left with nothing posted and nothing held.
  template <class Fn>
  void forEachActive(Fn&& fn) {
    if (recvAny_) {
      for (int p = 0; p < nranks_; ++p) {
        if (p != rank_) fn(p);
      }
    } else {
      for (size_t i = 0; i < active_.size(); ++i) fn(active_[i]);
    }
    for (size_t i = 0; i < active_.size();) {
      const int p = active_[i];
      if (posted(p) || mayHoldBytes_[p]) {
        ++i;
        continue;
      }
      isActive_[p] = 0;
      active_[i] = active_.back();
      active_.pop_back();
    }
  }
  size_t pending_ = 0;
  int* opCounter_ = nullptr;  // countMessagesIn
  size_t sliceBytes_;
  std::chrono::microseconds aliveCheck_;  // XCCL_ALIVE_CHECK_US
  bool streamingStores_ = false;
  int anyStart_ = 0;
  shm::Doorbell* bell_ = nullptr;
  bool peerReadOn_;        // XCCL_PEER_READ
  bool checksum_ = false;  // XCCL_CHECKSUM
  algo::SlotAreaPtr slots_;
  std::atomic<algo::SlotArea*> slotsShared_{nullptr};  // slots_, for other threads
  int64_t flipLeft_ = 0;  // XCCL_CHECKSUM_FLIP (tests): windows to the flip
  // XCCL_CHECKSUM=1: the trailer of a received message against what arrived.
  void verifyTrailer(int peer, const PendingMsg& m, const FrameTrailer& t);
  size_t peerReadMin_;                     // XCCL_PEER_READ_MIN
  std::vector<uint64_t> peerReadsPosted_;  // per peer: peer-read messages sent so far
  std::vector<char> peerReadLogged_;       // per peer: its first peer read was logged
  int64_t spinMaxUs_, spinUs_;             // the adaptive spin before sleeping (wait())
  bool yieldWhenIdle_ = false;
};

}  // namespace xccl
