// The engine's failure paths: checking a peer's header against our call, abort frames
// and notes (a failing rank's reason reaches its peers), a peer that left or went silent,
// and the deadline. Every message names the ranks, the call and what was still pending.
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "exchange.h"
#include "exchange_msg.h"
#include "frame.h"

namespace xccl {

// Fails the operation unless the header `h` from `peer` is the one message `m` expects.
void Exchange::checkHeader(int peer, const PendingMsg& m, const FrameHeader& h) const {
  if (h.magic != kFrameMagic || h.check != headerCheck(h)) {
    throw RemoteError(strCat("rank ", rank_, ": malformed frame from rank ", peer, " during ",
                             collName(sig_.type), " (bad magic or checksum)"));
  }
  const bool p2p = (h.flags & kFlagP2P) != 0;
  const OpSignature theirs = signatureOfHeader(h);
  if (p2p != m.p2p || h.seq != m.seq || (!p2p && theirs != m.sig)) {
    auto side = [](int r, const OpSignature& sig, bool isP2P, uint64_t seq) {
      return strCat(
          "rank ", r, " called ", describeCall(sig),
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
                             ": this rank called ", describeCall(m.sig), ", rank ", peer,
                             " called ", describeCall(theirs), " (the dtypes differ)"));
  }
  if (h.bytes != m.bytes) {
    throw RemoteError(strCat("rank ", rank_, ": size mismatch in ", describeCall(m.sig), " #",
                             m.seq, ": expected ", m.bytes, " bytes from rank ", peer, ", it sent ",
                             h.bytes, " (", describeCall(theirs), ")"));
  }
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
  if (h.magic != kFrameMagic || h.check != headerCheck(h) || !(h.flags & kFlagAbort)) return "";
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
    try {
      conns_[p]->leaveNote(text);  // read by a peer that finds us gone mid-frame
    } catch (const std::exception&) {
    }
    const Phase at = sends_[p].empty() ? Phase::kHeader : sends_[p].front()->phase;
    if (at != Phase::kHeader && at != Phase::kAwaitRead) continue;  // mid-frame
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

// Only peers this rank is waiting on. A peer that left is a failure only if we still need
// something from it once everything it sent before leaving has been read: a peer that
// finished the operation and destroyed its communicator has consumed every byte it needed
// from us and sent every byte we need from it. A dead peer we are not waiting on is noticed
// by whoever waits on it, whose failure closes its connections and so reaches us.
void Exchange::checkPeers() {
  forEachActive([&](int p) {
    if (!conns_[p]) return;
    if (!posted(p)) {
      // Bytes parked for it (TCP: still in our user-space ring) keep the wait busy too: a
      // peer that went silent will never take them.
      if (!mayHoldBytes_[p]) return;
      const std::string why = conns_[p]->silence();
      if (!why.empty()) failPeerGone(p, why, /*silent=*/true);
      return;
    }
    std::string why = conns_[p]->peerGone();
    if (why.empty()) {
      // Silent (heartbeats, core/heartbeat.h) but not gone: nothing more will come from it.
      why = conns_[p]->silence();
      if (!why.empty()) failPeerGone(p, why, /*silent=*/true);
      return;
    }
    // Drain: the transport moves what is left (TCP reads to EOF), the engine consumes it.
    bool moved = true;
    while (moved && posted(p)) {
      moved = conns_[p]->progress();
      moved |= progressRecvAny();
      moved |= progressRecv(p);
      // Sends complete only if they need no more room than the ring has: the peer reads
      // nothing more, so a send still needing bytes written is a send it never took.
      // A peer-read send completes when the peer read the buffer before it left.
      const PendingMsg* front = sends_[p].empty() ? nullptr : sends_[p].front().get();
      if (front != nullptr && (front->phase == Phase::kAwaitRead ||
                               (front->done == front->bytes && front->phase != Phase::kHeader &&
                                front->phase != Phase::kRef))) {
        moved |= progressSend(p);
      }
    }
    if (posted(p)) failPeerGone(p, why);
  });
}

// Before blaming another rank's failure: when the ring predecessor's check frame is already
// here and names a different call, that disagreement is the root cause; report it instead.
void Exchange::checkQuietPeer(int peer) {
  Connection* c = conns_[peer];
  if (c == nullptr || !c->connected()) return;
  FrameHeader h;
  if (!peekHeader(c, &h)) {
    // Nothing from it: a peer that left, or went silent (heartbeats), will not come.
    std::string why = c->peerGone();
    const char* doing = "waiting for its input in the slots";
    if (!why.empty()) failPeerGone(peer, why, /*silent=*/false, doing);
    why = c->silence();
    if (!why.empty()) failPeerGone(peer, why, /*silent=*/true, doing);
    return;
  }
  if (h.magic != kFrameMagic || h.check != headerCheck(h)) {
    throw RemoteError(strCat("rank ", rank_, ": malformed frame from rank ", peer, " during ",
                             describeCall(sig_), " (bad magic or checksum)"));
  }
  if (h.flags & kFlagAbort) {
    const std::string reason = abortReason(peer);
    throw RemoteError(strCat("rank ", rank_, ": rank ", peer, " failed: ", reason));
  }
  const bool p2p = (h.flags & kFlagP2P) != 0;
  throw RemoteError(strCat(
      "rank ", rank_, ": collective mismatch: rank ", rank_, " called ", describeCall(sig_),
      " (collective #", collSeq_, "), rank ", peer, " called ", describeCall(signatureOfHeader(h)),
      p2p ? strCat(" (point-to-point #", h.seq, ")") : strCat(" (collective #", h.seq, ")"),
      ". The ranks of a group must issue the same collectives in the same order with the same "
      "dtype, element count, reduction op and root"));
}

void Exchange::preferMismatch() {
  if (nranks_ < 2) return;
  const int prev = ringPrev();
  if (conns_[prev] == nullptr || recvs_[prev].empty()) return;
  const PendingMsg& m = *recvs_[prev].front();
  if (m.p2p || m.phase != Phase::kHeader) return;
  FrameHeader h;
  if (!peekHeader(conns_[prev], &h)) return;
  if (h.magic != kFrameMagic || h.check != headerCheck(h) || (h.flags & kFlagAbort)) return;
  checkHeader(prev, m, h);  // throws the mismatch, if there is one
}

void Exchange::failPeerGone(int peer, const std::string& why, bool silent, const char* doing) {
  preferMismatch();
  std::string reason = abortReason(peer);
  if (reason.empty()) reason = conns_[peer]->peerNote();
  // A departed (not silent) peer may have failed and left a note that trails its departure.
  const auto lagEnd = Clock::now() + std::chrono::milliseconds(conns_[peer]->noteLagMs());
  while (reason.empty() && !silent && Clock::now() < lagEnd) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    reason = conns_[peer]->peerNote();
  }
  if (!reason.empty())
    throw RemoteError(strCat("rank ", rank_, ": rank ", peer, " failed: ", reason));
  std::string what;
  if (!sends_[peer].empty()) {
    const PendingMsg& m = *sends_[peer].front();
    what = m.bytes == 0 ? std::string("sending it a header-only message")
           : m.phase == Phase::kAwaitRead
               ? strCat("waiting for it to read ", m.bytes, " bytes from this rank's buffer")
               : strCat("sending ", m.bytes - m.done, " of ", m.bytes, " bytes to it");
  } else if (!recvs_[peer].empty()) {
    const PendingMsg& m = *recvs_[peer].front();
    what = m.bytes == 0 ? std::string("waiting for a header-only message from it")
                        : strCat("receiving ", m.bytes - m.done, " of ", m.bytes, " bytes from it");
  } else if (recvAny_) {
    what = "receiving from any rank";
  } else if (doing != nullptr) {
    what = doing;
  } else {
    what = "handing it bytes it had not taken yet (still in this rank's send buffer)";
  }
  if (silent) {
    throw RemoteError(strCat("rank ", rank_, ": rank ", peer, " (", conns_[peer]->kind(),
                             ") went silent during ", describeCall(sig_), " #", collSeq_, ": it ",
                             why, "; this rank was still ", what));
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
  for (int p = 0; p < nranks_; ++p) {
    if (mayHoldBytes_[p] && sends_[p].empty())
      what += strCat(" bytes sent to rank ", p, " leaving;");
  }
  throw Timeout(strCat("rank ", rank_, ": ", collName(sig_.type), " #", collSeq_,
                       " timed out after ", deadline_.budgetMs(), " ms; waiting for:", what));
}

}  // namespace xccl
