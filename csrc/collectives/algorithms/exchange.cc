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

#include "exchange_msg.h"
#include "frame.h"

#include <algorithm>
#include <cstring>

#include "collectives/device/device.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"

namespace xccl {

XCCL_PARAM(SliceBytes, "SLICE_BYTES", 128 << 10)
XCCL_PARAM(AliveCheckUs, "ALIVE_CHECK_US", 1000)
// Longest a waiting engine polls before it sleeps on its doorbell (µs); the spin adapts
// below it. 0 sleeps at once.
XCCL_PARAM(SpinUs, "SPIN_US", 50)
// Peer reads (single copy between the processes of a host, where the device can share its
// memory): 0 turns them off; messages of at least PEER_READ_MIN bytes use them.
XCCL_PARAM(PeerRead, "PEER_READ", 1)
XCCL_PARAM(PeerReadMin, "PEER_READ_MIN", 64 << 10)

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
  aliveCheck_ = std::chrono::microseconds(xcclParamAliveCheckUs());
  tuning_ = readTuning();
  peerReadOn_ = xcclParamPeerRead() != 0;
  const int64_t readMin = xcclParamPeerReadMin();
  XCCL_CHECK(readMin >= 1, "XCCL_PEER_READ_MIN=", readMin, " must be at least 1");
  peerReadMin_ = static_cast<size_t>(readMin);
  peerReadsPosted_.assign(nranks, 0);
  peerReadLogged_.assign(nranks, 0);
  spinMaxUs_ = xcclParamSpinUs();
  XCCL_CHECK(spinMaxUs_ >= 0, "XCCL_SPIN_US=", spinMaxUs_, " must be >= 0");
  spinUs_ = spinMaxUs_;
  setHosts({ring_});
}

Exchange::~Exchange() {
  for (const Scratch& s : scratch_) device_.free(s.ptr);
}

Exchange::Scratch Exchange::takeScratch(size_t bytes) {
  if (bytes > kScratchMax) return Scratch{static_cast<char*>(device_.alloc(bytes)), bytes};
  for (size_t i = 0; i < scratch_.size(); ++i) {
    if (scratch_[i].capacity < bytes) continue;
    Scratch s = scratch_[i];
    scratch_.erase(scratch_.begin() + static_cast<long>(i));
    return s;
  }
  size_t capacity = 4096;
  while (capacity < bytes) capacity *= 2;
  return Scratch{static_cast<char*>(device_.alloc(capacity)), capacity};
}

void Exchange::giveScratch(const Scratch& s) {
  if (s.capacity <= kScratchMax && scratch_.size() < kMaxScratchKept) {
    scratch_.push_back(s);
    return;
  }
  device_.free(s.ptr);
}

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

// Messages are reused: a small collective posts a few, and allocating each was a good part
// of its host time. A spare is taken only when nobody else holds it (an algorithm may keep a
// receipt until its wait() returns).
MsgRef Exchange::newMsg() {
  while (!spare_.empty()) {
    MsgRef m = std::move(spare_.back());
    spare_.pop_back();
    if (m.use_count() == 1) {
      *m = PendingMsg{};
      return m;
    }
  }
  return std::make_shared<PendingMsg>();
}

void Exchange::retire(std::deque<MsgRef>& q) {
  if (q.front()->opLeft != nullptr) --*q.front()->opLeft;
  if (spare_.size() < kMaxSpare) spare_.push_back(std::move(q.front()));
  q.pop_front();
}

static void checkPeerArg(int peer, int rank, int nranks, const char* what) {
  XCCL_CHECK(peer >= 0 && peer < nranks && peer != rank, what, ": peer ", peer,
             " out of range for rank ", rank, " of ", nranks);
}

void Exchange::send(int peer, const void* src, size_t bytes) {
  checkPeerArg(peer, rank_, nranks_, "send");
  MsgRef m = newMsg();
  m->kind = MsgKind::kSend;
  m->peer = peer;
  m->p2p = isPointToPoint(sig_.type);
  m->src = static_cast<const char*>(src);
  m->bytes = bytes;
  m->padLeft = padOf(bytes);
  m->seq = m->p2p ? p2pSent_[peer]++ : collSeq_;
  m->sig = sig_;
  m->opLeft = opCounter_;
  if (opCounter_ != nullptr) ++*opCounter_;
  sends_[peer].push_back(std::move(m));
  ++pending_;
}

MsgRef Exchange::recv(int peer, void* dst, size_t bytes) {
  checkPeerArg(peer, rank_, nranks_, "recv");
  MsgRef m = newMsg();
  m->kind = MsgKind::kRecv;
  m->peer = peer;
  m->p2p = isPointToPoint(sig_.type);
  m->dst = static_cast<char*>(dst);
  m->bytes = bytes;
  m->padLeft = padOf(bytes);
  m->seq = m->p2p ? p2pRecvd_[peer]++ : collSeq_;
  m->sig = sig_;
  m->opLeft = opCounter_;
  if (opCounter_ != nullptr) ++*opCounter_;
  recvs_[peer].push_back(m);
  ++pending_;
  return m;
}

MsgRef Exchange::recvReduce(int peer, void* dst, const void* local, size_t count,
                            xcclDataType_t dtype, xcclRedOp_t op) {
  checkPeerArg(peer, rank_, nranks_, "recvReduce");
  MsgRef m = newMsg();
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
  m->opLeft = opCounter_;
  if (opCounter_ != nullptr) ++*opCounter_;
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
  MsgRef m = newMsg();
  m->kind = MsgKind::kRecv;
  m->peer = -1;
  m->p2p = true;
  m->dst = static_cast<char*>(dst);
  m->bytes = bytes;
  m->padLeft = padOf(bytes);
  m->anyPeerOut = peerOut;
  m->sig = sig_;
  m->opLeft = opCounter_;
  if (opCounter_ != nullptr) ++*opCounter_;
  recvAny_ = std::move(m);
  ++pending_;
}

bool Exchange::viaPeerRead(int peer, PendingMsg& m) {
  if (m.peerRead < 0) {
    const bool could = peerReadOn_ && m.bytes >= peerReadMin_ && conns_[peer]->peerReads();
    m.peerRead = could && device_.exportBuffer(m.src, m.bytes, &m.ref);
    if (could && m.peerRead == 0 && firstTime("peer-read-declined")) {
      XCCL_INFO(SHM, "rank ", rank_, ": messages of ", peerReadMin_, " bytes or more to ranks of ",
                "this host go through the rings (two copies): device ", device_.name(),
                " cannot share this memory (single copy needs device memory a peer can map, "
                "e.g. xdev)");
    }
  }
  return m.peerRead == 1;
}

// A peer-read send: its header and the reference to its buffer go in the stream (each a
// 64-byte piece, so neither needs contiguous room across the ring's end), then it waits
// until the peer has read the buffer. A forward sends only once its source has landed
// whole: the peer may read any byte of it.
bool Exchange::progressPeerReadSend(int peer, PendingMsg& m) {
  Connection* c = conns_[peer];
  void* win = nullptr;
  bool moved = false;
  if (m.phase == Phase::kHeader) {
    if (m.after && m.after->done < m.bytes) return false;
    if (c->reserveSend(&win, sizeof(FrameHeader)) < sizeof(FrameHeader)) return false;
    FrameHeader h = makeHeader(m.sig, (m.p2p ? kFlagP2P : 0) | kFlagPeerRead, m.seq, m.bytes);
    std::memcpy(win, &h, sizeof(h));
    c->commitSend(sizeof(h));
    m.phase = Phase::kRef;
    moved = true;
  }
  if (m.phase == Phase::kRef) {
    if (c->reserveSend(&win, sizeof(PeerRef)) < sizeof(PeerRef)) return moved;
    std::memcpy(win, &m.ref, sizeof(PeerRef));
    c->commitSend(sizeof(PeerRef));
    m.readSeq = ++peerReadsPosted_[peer];
    m.phase = Phase::kAwaitRead;
    moved = true;
  }
  if (c->peerReadsDone() < m.readSeq) return moved;
  retire(sends_[peer]);
  --pending_;
  return true;
}

bool Exchange::progressSend(int peer) {
  auto& q = sends_[peer];
  if (q.empty()) return false;
  PendingMsg& m = *q.front();
  if (m.phase == Phase::kHeader ? viaPeerRead(peer, m) : m.peerRead == 1) {
    return progressPeerReadSend(peer, m);
  }
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
  retire(q);
  --pending_;
  mayHoldBytes_[peer] = 1;
  return true;
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
    if (h.magic == kFrameMagic && h.check == headerCheck(h) && (h.flags & kFlagAbort)) {
      std::string why = abortReason(peer);
      if (why.empty()) return false;  // its text is still arriving
      preferMismatch();
      throw RemoteError(strCat("rank ", rank_, ": rank ", peer, " failed: ", why));
    }
    checkHeader(peer, m, h);
    c->consumeRecv(sizeof(h));
    m.phase = (h.flags & kFlagPeerRead) ? Phase::kRef : Phase::kPayload;
    moved = true;
  }
  if (m.phase == Phase::kRef) {
    // The reference to the sender's buffer follows its header.
    if (c->peekRecv(&win) < sizeof(PeerRef)) return moved;
    PeerRef ref;
    std::memcpy(&ref, win, sizeof(ref));
    c->consumeRecv(sizeof(ref));
    m.peerSrc = static_cast<const char*>(device_.importBuffer(ref, c->peerPid(), m.bytes));
    m.phase = Phase::kPayload;
    if (!peerReadLogged_[peer]) {
      peerReadLogged_[peer] = 1;
      XCCL_INFO(SHM, "rank ", rank_, " <- ", peer, ": single copy: reading rank ", peer,
                "'s buffers in place (peer reads of messages of XCCL_PEER_READ_MIN=", peerReadMin_,
                " bytes or more)");
    }
    return true;  // one piece per visit
  }
  if (m.phase == Phase::kPayload && m.peerSrc != nullptr) {
    // One pass straight out of the sender's buffer, a slice per visit.
    if (moved) return true;
    const size_t n = std::min(m.bytes - m.done, sliceBytes_);
    if (m.kind == MsgKind::kRecvReduce) {
      device_.reduce(m.dst + m.done, m.local + m.done, m.peerSrc + m.done, n / m.esize, m.dtype,
                     m.op);
    } else {
      device_.copy(m.dst + m.done, m.peerSrc + m.done, n,
                   streamingStores_ && !m.forwarded ? CopyKind::kStagingToDeviceNoReuse
                                                    : CopyKind::kDeviceToDevice);
    }
    m.done += n;
    if (m.done < m.bytes) return true;
    c->peerReadDone();
    retire(q);
    --pending_;
    return true;
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
  retire(q);
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
    if (h.magic != kFrameMagic || h.check != headerCheck(h) || !(h.flags & kFlagP2P)) continue;
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

bool Exchange::progressAll(bool* busy) {
  bool progressed = progressRecvAny();
  *busy = pending_ > 0;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    Connection* c = conns_[p];
    const bool posted = !sends_[p].empty() || !recvs_[p].empty() || (recvAny_ != nullptr);
    if (!posted) {
      if (!mayHoldBytes_[p]) continue;
      mayHoldBytes_[p] = c->sendPending();
      if (!mayHoldBytes_[p]) continue;
    }
    *busy = true;
    progressed |= c->progress();
    progressed |= progressSend(p);
    progressed |= progressRecv(p);
  }
  return progressed;
}

bool Exchange::holdsBytes() {
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || !mayHoldBytes_[p]) continue;
    mayHoldBytes_[p] = conns_[p]->sendPending();
    if (mayHoldBytes_[p]) return true;
  }
  return false;
}

bool Exchange::sleepOnDoorbell(int64_t timeoutUs) {
  if (bell_ == nullptr) return false;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || !posted(p)) continue;
    if (!conns_[p]->ringsDoorbell()) return false;  // a TCP peer would not wake us
  }
  const uint32_t seen = bell_->prepare();
  bool busy = false;
  if (progressAll(&busy) || !busy) {  // moved after all (or done): no sleep
    bell_->cancel();
    return false;
  }
  bell_->sleep(seen, timeoutUs);
  return true;
}

void Exchange::wait(const std::function<bool()>& more) {
  Backoff backoff;
  auto lastCheck = Clock::now();
  const auto checkEvery = aliveCheck_;
  Clock::time_point idleSince{};
  bool spinning = false;  // idle, and still within this wait's spin time
  try {
    for (;;) {
      bool busy = false;
      bool progressed = progressAll(&busy);
      if (more && (progressed || !busy || backoff.count() % 64 == 63) && more()) {
        progressed = busy = true;  // more was posted
      }
      if (!busy) break;  // every message done and every byte handed to the wire
      if (progressed) {
        // The spin ended the idle stretch: next time spin a little longer.
        if (spinning) spinUs_ = std::min(spinMaxUs_, spinUs_ + spinUs_ / 4 + 1);
        spinning = false;
        backoff.reset();
        continue;
      }
      if (!spinning && backoff.count() == 0) {
        spinning = true;
        idleSince = Clock::now();
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
      if (spinning && now - idleSince >= std::chrono::microseconds(spinUs_)) {
        // Spun out without progress: sleep on the doorbell (where every peer waited on
        // rings it), and spin less next time.
        const int64_t untilCheck =
            std::chrono::duration_cast<std::chrono::microseconds>(checkEvery - (now - lastCheck))
                .count();
        if (sleepOnDoorbell(std::max<int64_t>(untilCheck, 50))) {
          spinUs_ -= spinUs_ / 4 + (spinUs_ > 0);
          spinning = false;
          backoff.reset();
          now = Clock::now();
        }
      }
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
