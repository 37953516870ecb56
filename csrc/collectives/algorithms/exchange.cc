// The progress engine: framing, matching and nonblocking progress of posted messages.
//
// Stream layout, per direction of a connection:
//
//   | header 64 B | payload (bytes) | pad to 64 B | header 64 B | payload | pad | ...
//
// Each posted message walks three phases: header, payload, pad. A send copies device
// memory into the transport's window; a receive copies (or reduces) straight out of the
// transport's window into device memory, so no byte is staged twice. One slice at most
// is moved per visit, so sends and receives to different peers interleave and both ring
// directions keep flowing; a message completes in the visit that moves its last byte.
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

constexpr uint32_t kMagic = 0x58434c32;  // "XCL2": the 64-byte header with the caller's call
constexpr size_t kAlign = 64;
constexpr uint16_t kFlagP2P = 1;
constexpr uint16_t kFlagAbort = 2;      // payload: the sender's error text
constexpr size_t kMaxAbortText = 960;  // an abort frame is at most 1 KiB

struct FrameHeader {
  uint32_t magic;
  uint16_t type;  // CollType of the sender's call
  uint16_t flags;
  uint64_t seq;    // collective sequence number, or per-peer point-to-point counter
  uint64_t bytes;  // payload bytes of this message
  uint64_t count;  // the sender's call: element count (normalised, see OpSignature)
  int32_t root;    // ... root (-1: none)
  int16_t dtype;   // ... xcclDataType_t (-1: none)
  int16_t op;      // ... xcclRedOp_t (-1: not a reduction)
  uint64_t reserved[2];
  uint64_t check;
};
static_assert(sizeof(FrameHeader) == kAlign, "header is one alignment unit");

namespace {

uint64_t headerCheck(const FrameHeader& h) {
  uint64_t x =
      (static_cast<uint64_t>(h.magic) << 32) ^ (static_cast<uint64_t>(h.type) << 16) ^ h.flags;
  x ^= h.seq * 0x9e3779b97f4a7c15ULL;
  x ^= h.bytes * 0xc2b2ae3d27d4eb4fULL;
  x ^= h.count * 0x165667b19e3779f9ULL;
  x ^= (static_cast<uint64_t>(static_cast<uint32_t>(h.root)) << 32 |
        static_cast<uint64_t>(static_cast<uint16_t>(h.dtype)) << 16 |
        static_cast<uint16_t>(h.op)) *
       0x27d4eb2f165667c5ULL;
  return x ^ (x >> 29);
}

size_t padOf(size_t bytes) { return (kAlign - bytes % kAlign) % kAlign; }

FrameHeader makeHeader(const OpSignature& sig, uint16_t flags, uint64_t seq, uint64_t bytes) {
  FrameHeader h{};
  h.magic = kMagic;
  h.type = static_cast<uint16_t>(sig.type);
  h.flags = flags;
  h.seq = seq;
  h.bytes = bytes;
  h.count = sig.count;
  h.root = sig.root;
  h.dtype = static_cast<int16_t>(sig.dtype);
  h.op = static_cast<int16_t>(sig.op);
  h.check = headerCheck(h);
  return h;
}

OpSignature signatureOfHeader(const FrameHeader& h) {
  OpSignature sig;
  sig.type = static_cast<CollType>(h.type);
  sig.dtype = h.dtype;
  sig.op = h.op;
  sig.root = h.root;
  sig.count = h.count;
  return sig;
}

}  // namespace

OpSignature signatureOf(const CollArgs& args) {
  OpSignature sig;
  sig.type = args.type;
  if (args.type != CollType::kBarrier) sig.dtype = static_cast<int>(args.dtype);
  if (isReduction(args.type)) sig.op = static_cast<int>(args.op);
  if (hasRoot(args.type)) sig.root = args.root;
  if (args.type != CollType::kAllToAllv && args.type != CollType::kBarrier) sig.count = args.count;
  return sig;
}

std::string describeCall(const OpSignature& sig) {
  std::string s = strCat(collName(sig.type), "(");
  if (sig.type == CollType::kBarrier) return s + ")";
  const bool knownType = sig.dtype >= 0 && sig.dtype < xcclNumTypes;
  s += knownType ? xcclTypeName(static_cast<xcclDataType_t>(sig.dtype))
                 : strCat("dtype ", sig.dtype);
  if (sig.type != CollType::kAllToAllv) s += strCat(", ", sig.count);
  if (sig.op >= 0 && sig.op < xcclNumOps) s += strCat(", ", xcclOpName(static_cast<xcclRedOp_t>(sig.op)));
  if (sig.op >= xcclNumOps) s += strCat(", op ", sig.op);
  if (sig.root >= 0) s += strCat(", root ", sig.root);
  return s + ")";
}

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
  OpSignature sig;  // the call this message belongs to (per message for point-to-point)
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
  setHosts({ring_});
}

Exchange::~Exchange() = default;

void Exchange::setHosts(std::vector<std::vector<int>> hosts) {
  std::vector<int> hostOf(nranks_, -1);
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (int r : hosts[h]) {
      XCCL_CHECK(r >= 0 && r < nranks_ && hostOf[r] < 0, "setHosts: rank ", r, " misplaced");
      hostOf[r] = static_cast<int>(h);
    }
  }
  for (int r = 0; r < nranks_; ++r) XCCL_CHECK(hostOf[r] >= 0, "setHosts: rank ", r, " missing");
  hosts_ = std::move(hosts);
  hostOf_ = std::move(hostOf);
}

void Exchange::beginOp(const OpSignature& sig, uint64_t collSeq, const Deadline& deadline,
                       bool streamingStores) {
  XCCL_CHECK(pending_ == 0, "beginOp with ", pending_, " messages still posted");
  streamingStores_ = streamingStores;
  sig_ = sig;
  collSeq_ = collSeq;
  deadline_ = deadline;
}

void Exchange::postCheck() {
  if (nranks_ < 2) return;
  send(ringNext(), nullptr, 0);
  recv(ringPrev(), nullptr, 0);
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
  m->p2p = isPointToPoint(sig_.type);
  m->src = static_cast<const char*>(src);
  m->bytes = bytes;
  m->padLeft = padOf(bytes);
  m->seq = m->p2p ? p2pSent_[peer]++ : collSeq_;
  m->sig = sig_;
  sends_[peer].push_back(std::move(m));
  ++pending_;
}

MsgRef Exchange::recv(int peer, void* dst, size_t bytes) {
  checkPeerArg(peer, rank_, nranks_, "recv");
  auto m = std::make_shared<PendingMsg>();
  m->kind = MsgKind::kRecv;
  m->peer = peer;
  m->p2p = isPointToPoint(sig_.type);
  m->dst = static_cast<char*>(dst);
  m->bytes = bytes;
  m->padLeft = padOf(bytes);
  m->seq = m->p2p ? p2pRecvd_[peer]++ : collSeq_;
  m->sig = sig_;
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
  m->sig = sig_;
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
  m->sig = sig_;
  recvAny_ = std::move(m);
  ++pending_;
}

bool Exchange::progressSend(int peer) {
  auto& q = sends_[peer];
  if (q.empty()) return false;
  PendingMsg& m = *q.front();
  Connection* c = conns_[peer];
  void* win = nullptr;
  bool moved = false;
  if (m.phase == Phase::kHeader) {
    if (c->reserveSend(&win, sizeof(FrameHeader)) < sizeof(FrameHeader)) return false;
    FrameHeader h = makeHeader(m.sig, m.p2p ? kFlagP2P : 0, m.seq, m.bytes);
    std::memcpy(win, &h, sizeof(h));
    c->commitSend(sizeof(h));
    m.phase = Phase::kPayload;
    moved = true;
  }
  if (m.phase == Phase::kPayload && m.done < m.bytes) {
    if (moved) return true;  // one piece per visit: the header was this visit's
    size_t want = std::min(m.bytes - m.done, sliceBytes_);
    if (m.after) want = std::min(want, m.after->done - m.done);  // only what has landed
    if (want == 0) return false;
    size_t got = c->reserveSendPayload(&win, want);
    if (got == 0) return false;
    device_.copy(win, m.src + m.done, got, CopyKind::kDeviceToStaging);
    c->commitSendPayload(got);
    m.done += got;
    moved = true;
    if (m.done < m.bytes) return true;
  }
  // Every payload byte is committed: the pad (if any) and completion belong to this visit,
  // so a message whose last byte the peer has consumed is never left "posted" (a peer that
  // leaves right after consuming it must not fail us).
  m.phase = Phase::kPad;
  if (m.padLeft > 0) {
    size_t got = c->reserveSendPayload(&win, m.padLeft);
    if (got == 0) return moved;
    if (!c->payloadLane()) std::memset(win, 0, got);  // a lane's window is device memory
    c->commitSendPayload(got);
    m.padLeft -= got;
    if (m.padLeft > 0) return true;
  }
  q.pop_front();
  --pending_;
  mayHoldBytes_[peer] = 1;
  return true;
}

// Reads the 64-byte header of the next message from `peer` into h.
// Returns false when it has not fully arrived yet.
static bool peekHeader(Connection* c, FrameHeader* h) {
  const void* win = nullptr;
  if (c->peekRecv(&win) < sizeof(FrameHeader)) return false;
  std::memcpy(h, win, sizeof(*h));
  return true;
}

// Fails the operation unless the header `h` from `peer` is the one message `m` expects.
void Exchange::checkHeader(int peer, const PendingMsg& m, const FrameHeader& h) const {
  if (h.magic != kMagic || h.check != headerCheck(h)) {
    throw RemoteError(strCat("rank ", rank_, ": malformed frame from rank ", peer, " during ",
                             collName(sig_.type), " (bad magic or checksum)"));
  }
  const bool p2p = (h.flags & kFlagP2P) != 0;
  const OpSignature theirs = signatureOfHeader(h);
  if (p2p != m.p2p || h.seq != m.seq || (!p2p && theirs != m.sig)) {
    auto side = [](int r, const OpSignature& sig, bool isP2P, uint64_t seq) {
      return strCat("rank ", r, " called ", describeCall(sig),
                    isP2P ? strCat(" (point-to-point #", seq, ")") : strCat(" (collective #", seq, ")"));
    };
    throw RemoteError(strCat(
        "rank ", rank_, ": collective mismatch: ", side(rank_, m.sig, m.p2p, m.seq), ", ",
        side(peer, theirs, p2p, h.seq),
        ". The ranks of a group must issue the same collectives in the same order with the same "
        "dtype, element count, reduction op and root"));
  }
  if (p2p && !isPointToPoint(theirs.type)) {
    throw RemoteError(strCat("rank ", rank_, ": malformed point-to-point frame from rank ", peer));
  }
  if (p2p && theirs.dtype != m.sig.dtype) {
    throw RemoteError(strCat("rank ", rank_, ": point-to-point #", m.seq, " with rank ", peer,
                             ": this rank called ", describeCall(m.sig), ", rank ", peer, " called ",
                             describeCall(theirs), " (the dtypes differ)"));
  }
  if (h.bytes != m.bytes) {
    throw RemoteError(strCat("rank ", rank_, ": size mismatch in ", describeCall(m.sig), " #", m.seq,
                             ": expected ", m.bytes, " bytes from rank ", peer, ", it sent ",
                             h.bytes, " (", describeCall(theirs), ")"));
  }
}

bool Exchange::progressRecv(int peer) {
  auto& q = recvs_[peer];
  if (q.empty()) return false;
  PendingMsg& m = *q.front();
  Connection* c = conns_[peer];
  const void* win = nullptr;
  bool moved = false;
  if (m.phase == Phase::kHeader) {
    FrameHeader h;
    if (!peekHeader(c, &h)) return false;
    if (h.magic == kMagic && h.check == headerCheck(h) && (h.flags & kFlagAbort)) {
      std::string why = abortReason(peer);
      if (why.empty()) return false;  // its text is still arriving
      preferMismatch();
      throw RemoteError(strCat("rank ", rank_, ": rank ", peer, " failed: ", why));
    }
    checkHeader(peer, m, h);
    c->consumeRecv(sizeof(h));
    m.phase = Phase::kPayload;
    moved = true;
  }
  if (m.phase == Phase::kPayload && m.done < m.bytes) {
    if (moved) return true;  // one piece per visit
    size_t avail = c->peekRecvPayload(&win);
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
    c->consumeRecvPayload(n);
    m.done += n;
    moved = true;
    if (m.done < m.bytes) return true;
  }
  // Every payload byte is in: skip the pad and complete in this visit.
  m.phase = Phase::kPad;
  if (m.padLeft > 0) {
    size_t n = std::min(c->peekRecvPayload(&win), m.padLeft);
    if (n == 0) return moved;
    c->consumeRecvPayload(n);
    m.padLeft -= n;
    if (m.padLeft > 0) return true;
  }
  q.pop_front();
  --pending_;
  return true;
}

// The text of the abort frame at the head of `peer`'s stream; empty when there is none or
// it has not fully arrived.
std::string Exchange::abortReason(int peer) {
  Connection* c = conns_[peer];
  const void* win = nullptr;
  size_t avail = c->peekRecv(&win);
  if (avail < sizeof(FrameHeader)) return "";
  FrameHeader h;
  std::memcpy(&h, win, sizeof(h));
  if (h.magic != kMagic || h.check != headerCheck(h) || !(h.flags & kFlagAbort)) return "";
  if (h.bytes > kMaxAbortText || avail < sizeof(h) + h.bytes) return "";
  std::string text(static_cast<const char*>(win) + sizeof(h), h.bytes);
  return text.empty() ? std::string("(no reason given)") : text;
}

// Best effort, never blocks: an abort frame goes to every peer whose outgoing stream is at a
// frame boundary and has room for the whole frame in one window.
void Exchange::sendAbortFrames(const std::string& why) {
  const std::string text = why.substr(0, kMaxAbortText);
  const size_t frame = sizeof(FrameHeader) + text.size() + padOf(text.size());
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || conns_[p] == nullptr) continue;
    if (!sends_[p].empty() && sends_[p].front()->phase != Phase::kHeader) continue;  // mid-frame
    try {
      void* win = nullptr;
      if (conns_[p]->reserveSend(&win, frame) < frame) continue;
      FrameHeader h = makeHeader(sig_, kFlagAbort, collSeq_, text.size());
      std::memcpy(win, &h, sizeof(h));
      std::memcpy(static_cast<char*>(win) + sizeof(h), text.data(), text.size());
      std::memset(static_cast<char*>(win) + sizeof(h) + text.size(), 0, padOf(text.size()));
      conns_[p]->commitSend(frame);
    } catch (const std::exception&) {
      // the connection is broken: the peer learns of our failure from its closure
    }
  }
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

bool Exchange::posted(int peer) const {
  return !sends_[peer].empty() || !recvs_[peer].empty() || (recvAny_ && recvs_[peer].empty());
}

// Only peers this rank is waiting on. A peer that left is a failure only if we still need
// something from it once everything it sent before leaving has been read: a peer that
// finished the operation and destroyed its communicator has consumed every byte it needed
// from us and sent every byte we need from it. A dead peer we are not waiting on is noticed
// by whoever waits on it, whose failure closes its connections and so reaches us.
void Exchange::checkPeers() {
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || !conns_[p] || !posted(p)) continue;
    std::string why = conns_[p]->peerGone();
    if (why.empty()) continue;
    // Drain: the transport moves what is left (TCP reads to EOF), the engine consumes it.
    bool moved = true;
    while (moved && posted(p)) {
      moved = conns_[p]->progress();
      moved |= progressRecvAny();
      moved |= progressRecv(p);
      // Sends complete only if they need no more room than the ring has: the peer reads
      // nothing more, so a send still needing bytes written is a send it never took.
      if (!sends_[p].empty() && sends_[p].front()->done == sends_[p].front()->bytes &&
          sends_[p].front()->phase != Phase::kHeader) {
        moved |= progressSend(p);
      }
    }
    if (posted(p)) failPeerGone(p, why);
  }
}

// Before blaming another rank's failure: when the ring predecessor's check frame is already
// here and names a different call, that disagreement is the root cause; report it instead.
void Exchange::preferMismatch() {
  if (nranks_ < 2) return;
  const int prev = ringPrev();
  if (conns_[prev] == nullptr || recvs_[prev].empty()) return;
  const PendingMsg& m = *recvs_[prev].front();
  if (m.p2p || m.phase != Phase::kHeader) return;
  FrameHeader h;
  if (!peekHeader(conns_[prev], &h)) return;
  if (h.magic != kMagic || h.check != headerCheck(h) || (h.flags & kFlagAbort)) return;
  checkHeader(prev, m, h);  // throws the mismatch, if there is one
}

void Exchange::failPeerGone(int peer, const std::string& why) {
  preferMismatch();
  std::string reason = abortReason(peer);
  if (!reason.empty()) throw RemoteError(strCat("rank ", rank_, ": rank ", peer, " failed: ", reason));
  std::string what;
  if (!sends_[peer].empty()) {
    const PendingMsg& m = *sends_[peer].front();
    what = m.bytes == 0 ? std::string("sending it a header-only message")
                        : strCat("sending ", m.bytes - m.done, " of ", m.bytes, " bytes to it");
  } else if (!recvs_[peer].empty()) {
    const PendingMsg& m = *recvs_[peer].front();
    what = m.bytes == 0 ? std::string("waiting for a header-only message from it")
                        : strCat("receiving ", m.bytes - m.done, " of ", m.bytes, " bytes from it");
  } else {
    what = "receiving from any rank";
  }
  throw RemoteError(strCat("rank ", rank_, ": connection to rank ", peer, " (",
                           conns_[peer]->kind(), ") lost during ", describeCall(sig_), " #",
                           collSeq_, ": the peer ", why, " while this rank was still ", what));
}

void Exchange::failTimeout() {
  preferMismatch();
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
  throw Timeout(strCat("rank ", rank_, ": ", collName(sig_.type), " #", collSeq_, " timed out after ",
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
            strCat("rank ", rank_, ": communicator aborted during ", collName(sig_.type)));
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
  } catch (const std::exception& e) {
    // Tell the peers why (best effort), then leave the engine empty: the communicator is
    // failed and will not reuse this state.
    sendAbortFrames(e.what());
    for (auto& q : sends_) q.clear();
    for (auto& q : recvs_) q.clear();
    recvAny_.reset();
    pending_ = 0;
    throw;
  }
}

}  // namespace xccl
