// The progress engine's setup and posting: the knobs it reads once, device temporaries,
// hosts, the start of an operation, and posting messages (send / recv / recvReduce /
// sendForward / recvAny). Moving them is exchange_progress.cc; waiting, exchange_wait.cc;
// failing, exchange_failure.cc.
#include "exchange.h"

#include "exchange_msg.h"
#include "frame.h"

#include <algorithm>

#include "collectives/device/device.h"
#include "common/error.h"
#include "common/param.h"

namespace xccl {

XCCL_PARAM(SliceBytes, "SLICE_BYTES", 128 << 10, 64, 1 << 30)
XCCL_PARAM(AliveCheckUs, "ALIVE_CHECK_US", 1000, 0, kKnobMax)
// Longest a waiting engine polls before it sleeps on its doorbell (µs); the spin adapts
// below it. 0 sleeps at once.
XCCL_PARAM(SpinUs, "SPIN_US", 50, 0, kKnobMax)
// Peer reads (single copy between the processes of a host, where the device can share its
// memory): 0 turns them off; messages of at least PEER_READ_MIN bytes use them (0: the
// device's own threshold, Device::peerReadMinBytes).
XCCL_PARAM(PeerRead, "PEER_READ", 1, 0, 1)
XCCL_PARAM(PeerReadMin, "PEER_READ_MIN", 0, 0, kKnobMax)
// End-to-end payload checksums (frame.h): every message this rank sends carries a hash
// (common/sum64.h) of its payload, and every checksummed message it receives is verified before its
// operation completes. Peer reads are off with it: every payload byte crosses a checked
// transport (rings, sockets, payload lanes).
XCCL_PARAM(Checksum, "CHECKSUM", 0, 0, 1)
// Tests only: flip one bit in the Nth payload window this rank sends, after hashing it (a
// corruption in flight: with XCCL_CHECKSUM=1 the receiver must catch it, without it the
// result is silently wrong, which is what the checksum is for). 0: never.
XCCL_PARAM(ChecksumFlip, "CHECKSUM_FLIP", 0, 0, kKnobMax)

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
      mayHoldBytes_(nranks, 0),
      isActive_(nranks, 0) {
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
  checksum_ = xcclParamChecksum() != 0;
  flipLeft_ = xcclParamChecksumFlip();
  if (checksum_ || flipLeft_ > 0) {
    // The CRC is computed (and the test's bit flipped) where the payload sits in the
    // transport, which the host must reach.
    if (std::string(device_.name()) == "cuda") {
      throw InvalidUsage(
          "XCCL_CHECKSUM=1 is not available on the CUDA device with XCCL_CUDA_STAGING=0 (its "
          "payload lanes are device memory the host does not read); staged, the default, it is");
    }
    peerReadOn_ = false;
  }
  const int64_t readMin = xcclParamPeerReadMin();
  peerReadMin_ = readMin > 0 ? static_cast<size_t>(readMin) : device_.peerReadMinBytes();
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
  // The smallest kept one that fits.
  size_t best = scratch_.size();
  for (size_t i = 0; i < scratch_.size(); ++i) {
    if (scratch_[i].capacity >= bytes &&
        (best == scratch_.size() || scratch_[i].capacity < scratch_[best].capacity)) {
      best = i;
    }
  }
  if (best < scratch_.size()) {
    Scratch s = scratch_[best];
    scratch_.erase(scratch_.begin() + static_cast<long>(best));
    scratchKept_ -= s.capacity;
    return s;
  }
  if (bytes > kScratchKept) return Scratch{static_cast<char*>(device_.alloc(bytes)), bytes};
  size_t capacity = 4096;
  while (capacity < bytes) capacity *= 2;
  return Scratch{static_cast<char*>(device_.alloc(capacity)), capacity};
}

void Exchange::giveScratch(const Scratch& s) {
  // Kept while the budget allows, the largest ones first out to make room.
  while (!scratch_.empty() &&
         (scratch_.size() >= kMaxScratchKept || scratchKept_ + s.capacity > kScratchKept)) {
    auto largest = std::max_element(
        scratch_.begin(), scratch_.end(),
        [](const Scratch& a, const Scratch& b) { return a.capacity < b.capacity; });
    if (largest->capacity <= s.capacity) break;  // s is no better a keep than what is there
    scratchKept_ -= largest->capacity;
    device_.free(largest->ptr);
    scratch_.erase(largest);
  }
  if (scratch_.size() < kMaxScratchKept && scratchKept_ + s.capacity <= kScratchKept) {
    scratch_.push_back(s);
    scratchKept_ += s.capacity;
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

void Exchange::connectTo(int peer) {
  XCCL_CHECK(connector_, "rank ", rank_, ": no connection with rank ", peer);
  try {
    conns_[peer] = connector_(peer);
  } catch (const std::exception& e) {
    abandon(e.what());  // what this operation posted before it cannot be completed
    throw;
  }
  XCCL_CHECK(conns_[peer] != nullptr, "rank ", rank_, ": no connection with rank ", peer);
}

void Exchange::send(int peer, const void* src, size_t bytes) {
  checkPeerArg(peer, rank_, nranks_, "send");
  if (conns_[peer] == nullptr) connectTo(peer);
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
  activate(peer);
  ++pending_;
}

MsgRef Exchange::recv(int peer, void* dst, size_t bytes) {
  checkPeerArg(peer, rank_, nranks_, "recv");
  if (conns_[peer] == nullptr) connectTo(peer);
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
  activate(peer);
  ++pending_;
  return m;
}

MsgRef Exchange::recvReduce(int peer, void* dst, const void* local, size_t count,
                            xcclDataType_t dtype, xcclRedOp_t op) {
  checkPeerArg(peer, rank_, nranks_, "recvReduce");
  if (conns_[peer] == nullptr) connectTo(peer);
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
  activate(peer);
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
  for (int p = 0; p < nranks_; ++p) {  // any peer may be the one: reach them all
    if (p != rank_ && conns_[p] == nullptr) connectTo(p);
  }
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

}  // namespace xccl
