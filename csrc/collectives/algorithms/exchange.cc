// The progress engine: framing, matching and nonblocking progress of posted messages.
//
// Stream layout, per direction of a connection:
//
//   | header 32 B | payload (bytes) | pad to 32 B | header 32 B | payload | pad | ...
//
// Each posted message walks three phases: header, payload, pad. A send copies device
// memory into the transport's window; a receive copies (or reduces) straight out of the
// transport's window into device memory, so no byte is staged twice. One slice at most
// is moved per visit, so sends and receives to different peers interleave and both ring
// directions keep flowing.
#include "exchange.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "device/device.h"

namespace xccl {

XCCL_PARAM(SliceBytes, "SLICE_BYTES", 128 << 10)
XCCL_PARAM(AliveCheckUs, "ALIVE_CHECK_US", 1000)

namespace {

constexpr uint32_t kMagic = 0x58434c31;  // "XCL1"
constexpr size_t kAlign = 32;
constexpr uint16_t kFlagP2P = 1;

struct FrameHeader {
  uint32_t magic;
  uint16_t type;
  uint16_t flags;
  uint64_t seq;
  uint64_t bytes;
  uint64_t check;
};
static_assert(sizeof(FrameHeader) == kAlign, "header is one alignment unit");

uint64_t headerCheck(const FrameHeader& h) {
  uint64_t x =
      (static_cast<uint64_t>(h.magic) << 32) ^ (static_cast<uint64_t>(h.type) << 16) ^ h.flags;
  x ^= h.seq * 0x9e3779b97f4a7c15ULL;
  x ^= h.bytes * 0xc2b2ae3d27d4eb4fULL;
  return x ^ (x >> 29);
}

size_t padOf(size_t bytes) { return (kAlign - bytes % kAlign) % kAlign; }

}  // namespace

const char* collName(CollType type) {
  switch (type) {
    case CollType::kAllReduce:
      return "allreduce";
    case CollType::kBroadcast:
      return "broadcast";
    case CollType::kReduce:
      return "reduce";
    case CollType::kAllGather:
      return "allgather";
    case CollType::kReduceScatter:
      return "reducescatter";
    case CollType::kAllToAll:
      return "alltoall";
    case CollType::kAllToAllv:
      return "alltoallv";
    case CollType::kGather:
      return "gather";
    case CollType::kScatter:
      return "scatter";
    case CollType::kSend:
      return "send";
    case CollType::kRecv:
      return "recv";
    case CollType::kRecvAny:
      return "recvany";
    case CollType::kBarrier:
      return "barrier";
  }
  return "unknown";
}

enum class MsgKind { kSend, kRecv, kRecvReduce };
enum class Phase { kHeader, kPayload, kPad };

struct PendingMsg {
  MsgKind kind;
  int peer;
  bool p2p;
  const char* src = nullptr;    // send: device source
  char* dst = nullptr;          // recv: device destination
  const char* local = nullptr;  // recvReduce: local operand
  size_t bytes = 0;
  size_t done = 0;  // payload bytes moved
  size_t padLeft = 0;
  Phase phase = Phase::kHeader;
  xcclDataType_t dtype = xcclUint8;
  xcclRedOp_t op = xcclSum;
  size_t esize = 1;
  uint64_t seq = 0;
  int* anyPeerOut = nullptr;
  MsgRef after;            // sendForward: may send only what this receive has landed
  bool forwarded = false;  // a sendForward reads this receive's dst again
};

Exchange::Exchange(int rank, int nranks, Device& device, std::vector<Connection*> conns,
                   std::vector<int> ringOrder, const std::atomic<bool>& abortFlag)
    : rank_(rank),
      nranks_(nranks),
      device_(device),
      conns_(std::move(conns)),
      ring_(std::move(ringOrder)),
      ringPos_(nranks),
      abort_(abortFlag),
      sends_(nranks),
      recvs_(nranks),
      p2pSent_(nranks, 0),
      p2pRecvd_(nranks, 0),
      mayHoldBytes_(nranks, 0) {
  XCCL_CHECK(static_cast<int>(ring_.size()) == nranks, "ring has ", ring_.size(), " ranks, not ",
             nranks);
  for (int i = 0; i < nranks; ++i) ringPos_[ring_[i]] = i;
  int64_t slice = xcclParamSliceBytes();
  XCCL_CHECK(slice >= 64 && slice % 64 == 0, "XCCL_SLICE_BYTES=", slice,
             " must be a positive multiple of 64");
  sliceBytes_ = static_cast<size_t>(slice);
}

Exchange::~Exchange() = default;

void Exchange::beginOp(CollType type, uint64_t collSeq, const Deadline& deadline,
                       bool streamingStores) {
  XCCL_CHECK(pending_ == 0, "beginOp with ", pending_, " messages still posted");
  streamingStores_ = streamingStores;
  type_ = type;
  collSeq_ = collSeq;
  deadline_ = deadline;
}

static void checkPeerArg(int peer, int rank, int nranks, const char* what) {
  XCCL_CHECK(peer >= 0 && peer < nranks && peer != rank, what, ": peer ", peer,
             " out of range for rank ", rank, " of ", nranks);
}

void Exchange::send(int peer, const void* src, size_t bytes) {
  checkPeerArg(peer, rank_, nranks_, "send");
  auto m = std::make_shared<PendingMsg>();
  m->kind = MsgKind::kSend;
  m->peer = peer;
  m->p2p = type_ == CollType::kSend || type_ == CollType::kRecv || type_ == CollType::kRecvAny;
  m->src = static_cast<const char*>(src);
  m->bytes = bytes;
  m->padLeft = padOf(bytes);
  m->seq = m->p2p ? p2pSent_[peer]++ : collSeq_;
  sends_[peer].push_back(std::move(m));
  ++pending_;
}

MsgRef Exchange::recv(int peer, void* dst, size_t bytes) {
  checkPeerArg(peer, rank_, nranks_, "recv");
  auto m = std::make_shared<PendingMsg>();
  m->kind = MsgKind::kRecv;
  m->peer = peer;
  m->p2p = type_ == CollType::kSend || type_ == CollType::kRecv || type_ == CollType::kRecvAny;
  m->dst = static_cast<char*>(dst);
  m->bytes = bytes;
  m->padLeft = padOf(bytes);
  m->seq = m->p2p ? p2pRecvd_[peer]++ : collSeq_;
  recvs_[peer].push_back(m);
  ++pending_;
  return m;
}

MsgRef Exchange::recvReduce(int peer, void* dst, const void* local, size_t count,
                            xcclDataType_t dtype, xcclRedOp_t op) {
  checkPeerArg(peer, rank_, nranks_, "recvReduce");
  auto m = std::make_shared<PendingMsg>();
  m->kind = MsgKind::kRecvReduce;
  m->peer = peer;
  m->p2p = false;
  m->dst = static_cast<char*>(dst);
  m->local = static_cast<const char*>(local);
  m->dtype = dtype;
  m->op = op;
  m->esize = dtypeSize(dtype);
  XCCL_CHECK(m->esize > 0, "recvReduce: bad dtype ", static_cast<int>(dtype));
  m->bytes = count * m->esize;
  m->padLeft = padOf(m->bytes);
  m->seq = collSeq_;
  recvs_[peer].push_back(m);
  ++pending_;
  return m;
}

void Exchange::sendForward(int peer, const MsgRef& source) {
  XCCL_CHECK(source && source->kind != MsgKind::kSend, "sendForward needs a posted receive");
  send(peer, source->dst, source->bytes);
  sends_[peer].back()->after = source;
  source->forwarded = true;
}

void Exchange::recvAny(void* dst, size_t bytes, int* peerOut) {
  XCCL_CHECK(!recvAny_, "only one recvAny may be posted at a time");
  auto m = std::make_shared<PendingMsg>();
  m->kind = MsgKind::kRecv;
  m->peer = -1;
  m->p2p = true;
  m->dst = static_cast<char*>(dst);
  m->bytes = bytes;
  m->padLeft = padOf(bytes);
  m->anyPeerOut = peerOut;
  recvAny_ = std::move(m);
  ++pending_;
}

bool Exchange::progressSend(int peer) {
  auto& q = sends_[peer];
  if (q.empty()) return false;
  PendingMsg& m = *q.front();
  Connection* c = conns_[peer];
  void* win = nullptr;
  if (m.phase == Phase::kHeader) {
    if (c->reserveSend(&win, sizeof(FrameHeader)) < sizeof(FrameHeader)) return false;
    FrameHeader h{kMagic,
                  static_cast<uint16_t>(type_),
                  static_cast<uint16_t>(m.p2p ? kFlagP2P : 0),
                  m.seq,
                  m.bytes,
                  0};
    h.check = headerCheck(h);
    std::memcpy(win, &h, sizeof(h));
    c->commitSend(sizeof(h));
    m.phase = Phase::kPayload;
    return true;
  }
  if (m.phase == Phase::kPayload && m.done < m.bytes) {
    size_t want = std::min(m.bytes - m.done, sliceBytes_);
    if (m.after) want = std::min(want, m.after->done - m.done);  // only what has landed
    if (want == 0) return false;
    size_t got = c->reserveSend(&win, want);
    if (got == 0) return false;
    device_.copy(win, m.src + m.done, got, CopyKind::kDeviceToStaging);
    c->commitSend(got);
    m.done += got;
    return true;
  }
  m.phase = Phase::kPad;
  if (m.padLeft > 0) {
    size_t got = c->reserveSend(&win, m.padLeft);
    if (got == 0) return false;
    std::memset(win, 0, got);
    c->commitSend(got);
    m.padLeft -= got;
    if (m.padLeft > 0) return true;
  }
  q.pop_front();
  --pending_;
  mayHoldBytes_[peer] = 1;
  return true;
}

// Reads and validates the 32-byte header of the next message from `peer` into h.
// Returns false when it has not fully arrived yet.
static bool peekHeader(Connection* c, FrameHeader* h) {
  const void* win = nullptr;
  if (c->peekRecv(&win) < sizeof(FrameHeader)) return false;
  std::memcpy(h, win, sizeof(*h));
  return true;
}

bool Exchange::progressRecv(int peer) {
  auto& q = recvs_[peer];
  if (q.empty()) return false;
  PendingMsg& m = *q.front();
  Connection* c = conns_[peer];
  const void* win = nullptr;
  if (m.phase == Phase::kHeader) {
    FrameHeader h;
    if (!peekHeader(c, &h)) return false;
    if (h.magic != kMagic || h.check != headerCheck(h)) {
      throw RemoteError(strCat("rank ", rank_, ": malformed frame from rank ", peer, " during ",
                               collName(type_), " (bad magic or checksum)"));
    }
    const bool p2p = (h.flags & kFlagP2P) != 0;
    if (p2p != m.p2p || h.seq != m.seq || (!p2p && h.type != static_cast<uint16_t>(type_))) {
      throw RemoteError(
          strCat("rank ", rank_, ": operation mismatch with rank ", peer, ": this rank runs ",
                 collName(type_), m.p2p ? " (point-to-point #" : " #", m.seq, m.p2p ? ")" : "",
                 ", rank ", peer, " sent data for ", collName(static_cast<CollType>(h.type)),
                 p2p ? " (point-to-point #" : " #", h.seq, p2p ? ")" : "",
                 ": the ranks issued different collectives or in a different order"));
    }
    if (h.bytes != m.bytes) {
      throw RemoteError(strCat("rank ", rank_, ": size mismatch in ", collName(type_), " #", m.seq,
                               ": expected ", m.bytes, " bytes from rank ", peer, ", it sent ",
                               h.bytes, " (counts or dtypes differ across ranks)"));
    }
    c->consumeRecv(sizeof(h));
    m.phase = Phase::kPayload;
    return true;
  }
  if (m.phase == Phase::kPayload && m.done < m.bytes) {
    size_t avail = c->peekRecv(&win);
    size_t n = std::min({avail, m.bytes - m.done, sliceBytes_});
    n -= n % m.esize;
    if (n == 0) return false;
    if (m.kind == MsgKind::kRecvReduce) {
      device_.reduce(m.dst + m.done, m.local + m.done, win, n / m.esize, m.dtype, m.op);
    } else {
      device_.copy(m.dst + m.done, win, n,
                   streamingStores_ && !m.forwarded ? CopyKind::kStagingToDeviceNoReuse
                                                    : CopyKind::kStagingToDevice);
    }
    c->consumeRecv(n);
    m.done += n;
    return true;
  }
  m.phase = Phase::kPad;
  if (m.padLeft > 0) {
    size_t n = std::min(c->peekRecv(&win), m.padLeft);
    if (n == 0) return false;
    c->consumeRecv(n);
    m.padLeft -= n;
    if (m.padLeft > 0) return true;
  }
  q.pop_front();
  --pending_;
  return true;
}

// A recv-any takes the first peer whose next frame is a point-to-point message; frames
// of collectives belong to later operations and stay where they are. Once matched it
// becomes an ordinary receive from that peer.
bool Exchange::progressRecvAny() {
  if (!recvAny_) return false;
  for (int i = 0; i < nranks_; ++i) {
    int peer = (anyStart_ + i) % nranks_;
    if (peer == rank_ || !recvs_[peer].empty()) continue;
    FrameHeader h;
    if (!peekHeader(conns_[peer], &h)) continue;
    if (h.magic != kMagic || h.check != headerCheck(h) || !(h.flags & kFlagP2P)) continue;
    anyStart_ = peer + 1;
    recvAny_->peer = peer;
    recvAny_->seq = p2pRecvd_[peer]++;
    if (recvAny_->anyPeerOut) *recvAny_->anyPeerOut = peer;
    recvs_[peer].push_back(std::move(recvAny_));
    return true;  // pending_ unchanged: the message moved queues
  }
  return false;
}

// Only peers this rank is waiting on: a peer that finished and destroyed its
// communicator is not a failure unless we still need bytes from (or to) it. A dead peer we
// are not waiting on is noticed by whoever waits on it, whose failure closes its
// connections and so reaches us.
void Exchange::checkPeers() {
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || !conns_[p]) continue;
    if (!sends_[p].empty() || !recvs_[p].empty() || (recvAny_ && recvs_[p].empty())) {
      conns_[p]->checkAlive();
    }
  }
}

void Exchange::failTimeout() {
  std::string what;
  for (int p = 0; p < nranks_; ++p) {
    if (!sends_[p].empty()) {
      what += strCat(" send to rank ", p, " (", sends_[p].front()->done, "/",
                     sends_[p].front()->bytes, " bytes);");
    }
    if (!recvs_[p].empty()) {
      what += strCat(" recv from rank ", p, " (", recvs_[p].front()->done, "/",
                     recvs_[p].front()->bytes, " bytes);");
    }
  }
  if (recvAny_) what += " recv from any rank;";
  throw Timeout(strCat("rank ", rank_, ": ", collName(type_), " #", collSeq_, " timed out after ",
                       deadline_.budgetMs(), " ms; waiting for:", what));
}

void Exchange::wait() {
  Backoff backoff;
  auto lastCheck = Clock::now();
  const auto checkEvery = std::chrono::microseconds(xcclParamAliveCheckUs());
  try {
    for (;;) {
      bool progressed = progressRecvAny();
      bool busy = pending_ > 0;
      for (int p = 0; p < nranks_; ++p) {
        if (p == rank_) continue;
        Connection* c = conns_[p];
        const bool posted = !sends_[p].empty() || !recvs_[p].empty() || (recvAny_ != nullptr);
        if (!posted) {
          if (!mayHoldBytes_[p]) continue;
          mayHoldBytes_[p] = c->sendPending();
          if (!mayHoldBytes_[p]) continue;
        }
        busy = true;
        progressed |= c->progress();
        progressed |= progressSend(p);
        progressed |= progressRecv(p);
      }
      if (!busy) break;  // every message done and every byte handed to the wire
      if (progressed) {
        backoff.reset();
        continue;
      }
      backoff.idle();
      if (abort_.load(std::memory_order_relaxed)) {
        throw InvalidUsage(
            strCat("rank ", rank_, ": communicator aborted during ", collName(type_)));
      }
      // Reading the clock costs more than a poll of the rings: only every 64 idle polls
      // (and after every nap, which is long anyway).
      if (backoff.count() % 64 != 0 && !backoff.napping()) continue;
      auto now = Clock::now();
      if (now - lastCheck >= checkEvery) {
        lastCheck = now;
        checkPeers();
        if (deadline_.expired()) failTimeout();
      }
    }
  } catch (...) {
    // Leave the engine empty: the communicator is failed and will not reuse this state.
    for (auto& q : sends_) q.clear();
    for (auto& q : recvs_) q.clear();
    recvAny_.reset();
    pending_ = 0;
    throw;
  }
}

}  // namespace xccl
