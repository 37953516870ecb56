// The progress engine moving one posted message: framing, matching and nonblocking progress.
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
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "collectives/device/device.h"
#include "common/error.h"
#include "common/log.h"
#include "exchange.h"
#include "exchange_msg.h"
#include "frame.h"

namespace xccl {
namespace {

std::string hexU64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof(b), "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

bool Exchange::viaPeerRead(int peer, PendingMsg& m) {
  if (m.peerRead < 0) {
    const bool could = peerReadOn_ && m.bytes >= peerReadMin_ && conns_[peer]->peerReads();
    m.peerRead = could && device_.exportBuffer(m.src, m.bytes, &m.ref);
    if (could && m.peerRead == 0 && firstTime("peer-read-declined")) {
      XCCL_INFO(SHM, "rank ", rank_, ": messages of ", peerReadMin_, " bytes or more to ranks of ",
                "this host go through the rings (two copies): device ", device_.name(),
                " cannot share this memory (single copy needs memory a peer can map: xdev device "
                "memory, or host memory from xcclMemAlloc, docs/MEMORY.md)");
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
    m.checksummed = checksum_;
    FrameHeader h = makeHeader(
        m.sig, static_cast<uint16_t>((m.p2p ? kFlagP2P : 0) | (m.checksummed ? kFlagChecksum : 0)),
        m.seq, m.bytes);
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
    if (m.checksummed) {
      device_.copyHashed(win, m.src + m.done, got, CopyKind::kDeviceToStaging, m.done, &m.hash);
    } else {
      device_.copy(win, m.src + m.done, got, CopyKind::kDeviceToStaging);
    }
    if (flipLeft_ > 0 && --flipLeft_ == 0) {  // tests: a corruption in flight, after the hash
      static_cast<unsigned char*>(win)[got / 2] ^= 0x10;
    }
    c->commitSendPayload(got);
    m.done += got;
    moved = true;
    if (m.done < m.bytes) return true;
  }
  // Every payload byte is committed: the pad (if any) and completion belong to this visit,
  // so a message whose last byte the peer has consumed is never left "posted" (a peer that
  // leaves right after consuming it must not fail us).
  if (m.phase == Phase::kPayload) m.phase = Phase::kPad;
  if (m.phase == Phase::kPad && m.padLeft > 0) {
    size_t got = c->reserveSendPayload(&win, m.padLeft);
    if (got == 0) return moved;
    if (!c->payloadLane()) std::memset(win, 0, got);  // a lane's window is device memory
    c->commitSendPayload(got);
    m.padLeft -= got;
    if (m.padLeft > 0) return true;
  }
  if (m.checksummed) {
    m.phase = Phase::kTrailer;
    if (c->reserveSend(&win, sizeof(FrameTrailer)) < sizeof(FrameTrailer)) return moved;
    FrameTrailer t{};
    t.magic = kTrailerMagic;
    t.hash = m.hash;
    t.bytes = m.bytes;
    t.seq = m.seq;
    std::memcpy(win, &t, sizeof(t));
    c->commitSend(sizeof(t));
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
    m.checksummed = (h.flags & kFlagChecksum) != 0;
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
    const CopyKind into = streamingStores_ && !m.forwarded ? CopyKind::kStagingToDeviceNoReuse
                                                           : CopyKind::kStagingToDevice;
    if (m.kind == MsgKind::kRecvReduce) {
      if (m.checksummed) {
        device_.reduceHashed(m.dst + m.done, m.local + m.done, win, n / m.esize, m.dtype, m.op,
                             m.done, &m.hash);
      } else {
        device_.reduce(m.dst + m.done, m.local + m.done, win, n / m.esize, m.dtype, m.op);
      }
    } else if (m.checksummed) {
      device_.copyHashed(m.dst + m.done, win, n, into, m.done, &m.hash);
    } else {
      device_.copy(m.dst + m.done, win, n, into);
    }
    c->consumeRecvPayload(n);
    m.done += n;
    moved = true;
    if (m.done < m.bytes) return true;
  }
  // Every payload byte is in: skip the pad (and check the trailer) and complete in this visit.
  if (m.phase == Phase::kPayload) m.phase = Phase::kPad;
  if (m.phase == Phase::kPad && m.padLeft > 0) {
    size_t n = std::min(c->peekRecvPayload(&win), m.padLeft);
    if (n == 0) return moved;
    c->consumeRecvPayload(n);
    m.padLeft -= n;
    if (m.padLeft > 0) return true;
  }
  if (m.checksummed) {
    m.phase = Phase::kTrailer;
    if (c->peekRecv(&win) < sizeof(FrameTrailer)) return moved;
    FrameTrailer t;
    std::memcpy(&t, win, sizeof(t));
    c->consumeRecv(sizeof(t));
    verifyTrailer(peer, m, t);
  }
  retire(q);
  --pending_;
  return true;
}

// A mismatch fails this rank's operation (and through its abort frames every peer's) before
// the output is handed back: the bytes were reduced or copied as they arrived, but the
// operation that holds them never completes successfully.
void Exchange::verifyTrailer(int peer, const PendingMsg& m, const FrameTrailer& t) {
  const char* kind = conns_[peer]->kind();
  if (t.magic != kTrailerMagic || t.bytes != m.bytes || t.seq != m.seq) {
    preferMismatch();
    throw RemoteError(strCat("rank ", rank_, ": the checksum trailer of rank ", peer,
                             "'s message (", kind, ", sequence ", m.seq, ", ", m.bytes,
                             " bytes) is damaged (XCCL_CHECKSUM=1)"));
  }
  if (t.hash != m.hash) {
    throw RemoteError(strCat("rank ", rank_, ": payload from rank ", peer, " over ", kind,
                             " failed its checksum (sequence ", m.seq, ", bytes [0, ", m.bytes,
                             ") of the message: hash ", hexU64(m.hash), " arrived, ",
                             hexU64(t.hash),
                             " sent; XCCL_CHECKSUM=1): corrupted in flight, the "
                             "operation's output is not returned"));
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
    if (h.magic != kFrameMagic || h.check != headerCheck(h) || !(h.flags & kFlagP2P)) continue;
    anyStart_ = peer + 1;
    recvAny_->peer = peer;
    recvAny_->seq = p2pRecvd_[peer]++;
    if (recvAny_->anyPeerOut) *recvAny_->anyPeerOut = peer;
    recvs_[peer].push_back(std::move(recvAny_));
    activate(peer);
    return true;  // pending_ unchanged: the message moved queues
  }
  return false;
}

}  // namespace xccl
