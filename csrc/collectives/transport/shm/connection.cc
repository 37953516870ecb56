#include "connection.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>

#include "collectives/device/device.h"
#include "common/auth.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "common/process.h"
#include "common/shared_memory.h"
#include "ring.h"

namespace xccl {
namespace shm {

// Bytes in each shared-memory ring (one per direction per pair); a multiple of 64.
XCCL_PARAM(ShmBuffsize, "SHM_BUFFSIZE", 1 << 20, 256, 1 << 30)
// Payload lanes in shareable device memory: -1 = where the device prefers them (CUDA),
// 0 = never, 1 = wherever the device can share memory (the host device too: tests).
XCCL_PARAM(ShmLane, "SHM_LANE", -1, -1, 1)
// Bytes in each payload lane; a multiple of 64. Large, so that a device copy per window
// amortises its launch and synchronization.
XCCL_PARAM(ShmLaneBuffsize, "SHM_LANE_BUFFSIZE", 16 << 20, 256, 1 << 30)

size_t ringBytesKnob() {
  int64_t ring = xcclParamShmBuffsize();
  XCCL_CHECK(ring >= 256 && ring % 64 == 0 && static_cast<uint64_t>(ring) <= kMaxRing,
             "XCCL_SHM_BUFFSIZE=", ring, " must be a multiple of 64 between 256 and ", kMaxRing);
  return static_cast<size_t>(ring);
}

void initHeader(Header* mem, int rank, int peer, size_t ringBytes, const std::string& secret) {
  // The pages are zero (fresh memfd), so the atomics start at 0/false; construct them
  // formally all the same. The magic is published last: an opener that sees it sees the rest.
  Header* h = new (mem) Header();
  h->version = kVersion;
  h->ringBytes = static_cast<uint64_t>(ringBytes);
  h->creatorPid = static_cast<int32_t>(getpid());
  h->creatorRank = rank;
  h->openerRank = peer;
  const std::string nonce = auth::nonce();
  const std::string proof = auth::proof(secret, "shm-ring", nonce, "", ringContext(*h));
  std::memcpy(h->nonce, nonce.data(), nonce.size());
  std::memcpy(h->proof, proof.data(), proof.size());
  std::atomic_thread_fence(std::memory_order_release);
  reinterpret_cast<std::atomic<uint64_t>*>(&h->magic)->store(kMagic, std::memory_order_release);
}

void checkHeader(const Header& h, int rank, int peer, long pid, size_t ringBytes,
                 uint64_t laneBytes, const std::string& secret) {
  if (h.magic != kMagic || h.version != kVersion || h.ringBytes != ringBytes ||
      h.laneBytes != laneBytes || h.creatorRank != peer || h.openerRank != rank ||
      h.creatorPid != pid) {
    throw RemoteError(strCat("refused SHM ring from rank ", peer, " (pid ", pid,
                             "): bad header (not ours, or another version)"));
  }
  const std::string nonce(reinterpret_cast<const char*>(h.nonce), auth::kNonceBytes);
  const std::string theirs(reinterpret_cast<const char*>(h.proof), auth::kProofBytes);
  if (!auth::sameProof(theirs, auth::proof(secret, "shm-ring", nonce, "", ringContext(h)))) {
    XCCL_WARN(SHM, "refused SHM ring from rank ", peer, " (pid ", pid, "): bad secret");
    throw RemoteError(strCat("rank ", rank, ": refused SHM ring from rank ", peer, ": bad secret"));
  }
}

bool laneWanted(Device& device) {
  int64_t mode = xcclParamShmLane();
  return mode > 0 || (mode < 0 && device.prefersSharedRings());
}

OutgoingRing::OutgoingRing(int rank, int peer, const std::string& secret, Device& device) {
  const size_t ring = ringBytesKnob();
  seg_ = std::make_unique<Segment>(createSharedMapping(kHeaderBytes + ring, "xccl-shm-ring"));
  Header* h = seg_->header();
  initHeader(h, rank, peer, ring, secret);

  if (!laneWanted(device)) return;
  int64_t lane = xcclParamShmLaneBuffsize();
  XCCL_CHECK(lane >= 256 && lane % 64 == 0 && static_cast<uint64_t>(lane) <= kMaxRing,
             "XCCL_SHM_LANE_BUFFSIZE=", lane, " must be a multiple of 64 between 256 and ",
             kMaxRing);
  void* mem = device.allocShared(static_cast<size_t>(lane), &laneHandle_);
  if (mem == nullptr) {
    XCCL_INFO(SHM, "rank ", rank, " -> ", peer, ": device ", device.name(),
              " cannot share memory; payloads stay in the host ring");
    return;
  }
  XCCL_CHECK(!laneHandle_.empty() && laneHandle_.size() <= kMaxHandle &&
                 laneHandle_.find_first_of(" \t\n") == std::string::npos,
             "device ", device.name(), " gave a malformed shared-memory handle");
  h->laneBytes = static_cast<uint64_t>(lane);
  seg_->setLane(mem, &device, true);
}

OutgoingRing::~OutgoingRing() = default;

std::string OutgoingRing::describe() const {
  std::string d = strCat(getpid(), " ", seg_->fd(), " ", seg_->ringBytes());
  if (seg_->lane() != nullptr) d += strCat(" ", seg_->header()->laneBytes, " ", laneHandle_);
  return d;
}

std::unique_ptr<Segment> OutgoingRing::take() { return std::move(seg_); }

namespace {

// Opens and validates the peer's ring. `desc` comes from the store: parse it strictly.
std::unique_ptr<Segment> openPeerRing(int rank, int peer, const std::string& desc,
                                      const std::string& secret, Device& device) {
  long pid = 0, fd = 0;
  unsigned long long ring = 0, lane = 0;
  char handle[kMaxHandle + 1] = {0};
  char extra = 0;
  int fields = std::sscanf(desc.c_str(), "%ld %ld %llu %llu %256s %c", &pid, &fd, &ring, &lane,
                           handle, &extra);
  if ((fields != 3 && fields != 5) || pid <= 0 || fd < 0 || ring == 0 || ring > kMaxRing ||
      (fields == 5 && (lane == 0 || lane > kMaxRing || lane % 64 != 0))) {
    throw RemoteError(strCat("rank ", rank, ": malformed SHM descriptor from rank ", peer, ": '",
                             desc.substr(0, 64), "'"));
  }
  const std::string what = strCat("rank ", rank, ": rank ", peer, "'s SHM ring");
  auto seg = std::make_unique<Segment>(openSharedMapping(pid, fd, kHeaderBytes + ring, what));
  checkHeader(*seg->header(), rank, peer, pid, ring, lane, secret);
  if (lane != 0) {
    seg->setLane(device.openShared(handle, static_cast<int>(pid), lane), &device, false);
  }
  return seg;
}

// Watches a peer process for its exit: a pidfd (Linux 5.3+) becomes readable when the process
// terminates, zombie included, and a poll of it is one cheap syscall; where pidfds are not
// available, /proc/<pid>/stat is read instead (a path lookup and a read per check).
class ProcessWatch {
 public:
  explicit ProcessWatch(int pid) : pid_(pid) {
#if defined(SYS_pidfd_open)
    fd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#endif
  }
  ~ProcessWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  bool dead() const {
    if (fd_ < 0) return processDead(pid_);
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }

 private:
  int pid_;
  int fd_ = -1;
};

// One direction of one ring: the producer's or the consumer's end of `base[size]` with its
// two counters. `mine` caches the counter this end writes.
class RingEnd {
 public:
  RingEnd(char* base, size_t size, std::atomic<uint64_t>* head, std::atomic<uint64_t>* tail,
          bool producer)
      : base_(base), size_(size), head_(head), tail_(tail) {
    mine_ = (producer ? head : tail)->load(std::memory_order_relaxed);
  }

  // Producer: contiguous free space. *used receives the bytes in flight (for the caller's
  // corruption check: more than the ring holds).
  size_t reserve(void** window, size_t want, uint64_t* used) {
    *used = mine_ - tail_->load(std::memory_order_acquire);
    if (*used > size_) return 0;
    size_t pos = static_cast<size_t>(mine_ % size_);
    size_t n = std::min({want, size_ - static_cast<size_t>(*used), size_ - pos});
    *window = base_ + pos;
    window_ = n;
    return n;
  }
  void commit(size_t bytes) {
    XCCL_CHECK(bytes <= window_, "commitSend(", bytes, ") exceeds the reserved window of ",
               window_);
    window_ -= bytes;
    mine_ += bytes;
    head_->store(mine_, std::memory_order_release);
  }
  // Consumer: contiguous bytes received.
  size_t peek(const void** window, uint64_t* avail) {
    *avail = head_->load(std::memory_order_acquire) - mine_;
    if (*avail > size_) return 0;
    size_t pos = static_cast<size_t>(mine_ % size_);
    size_t n = std::min(static_cast<size_t>(*avail), size_ - pos);
    *window = base_ + pos;
    window_ = n;
    return n;
  }
  void consume(size_t bytes) {
    XCCL_CHECK(bytes <= window_, "consumeRecv(", bytes, ") exceeds the peeked window of ", window_);
    window_ -= bytes;
    mine_ += bytes;
    tail_->store(mine_, std::memory_order_release);
  }
  size_t size() const { return size_; }

 private:
  char* base_;
  size_t size_;
  std::atomic<uint64_t>* head_;
  std::atomic<uint64_t>* tail_;
  uint64_t mine_ = 0;
  size_t window_ = 0;
};

RingEnd byteRing(Segment& s, bool producer) {
  Header* h = s.header();
  return RingEnd(s.ring(), s.ringBytes(), &h->head, &h->tail, producer);
}

// The payload lane of a segment, or its byte ring when it has none.
RingEnd payloadRing(Segment& s, bool producer) {
  Header* h = s.header();
  if (s.lane() == nullptr) return byteRing(s, producer);
  return RingEnd(s.lane(), h->laneBytes, &h->laneHead, &h->laneTail, producer);
}

class ShmConnection : public Connection {
 public:
  ShmConnection(int rank, int peer, int peerPid, std::unique_ptr<Segment> send,
                std::unique_ptr<Segment> recv, Device& device, std::unique_ptr<Doorbell> peerBell)
      : rank_(rank),
        peer_(peer),
        peerPid_(peerPid),
        send_(std::move(send)),
        recv_(std::move(recv)),
        device_(device),
        peerBell_(std::move(peerBell)),
        watch_(peerPid),
        out_(byteRing(*send_, true)),
        in_(byteRing(*recv_, false)),
        outLane_(payloadRing(*send_, true)),
        inLane_(payloadRing(*recv_, false)),
        split_(send_->lane() != nullptr),
        peerSplit_(recv_->lane() != nullptr) {
    device_.registerStaging(send_->ring(), send_->ringBytes());
    device_.registerStaging(recv_->ring(), recv_->ringBytes());
  }

  ~ShmConnection() override {
    ShmConnection::close();  // this class's close: no dispatch in a destructor
    device_.unregisterStaging(send_->ring());
    device_.unregisterStaging(recv_->ring());
  }

  // Every move of a counter rings the peer's doorbell: it may sleep waiting for bytes (a
  // commit) or for room (a consume).
  size_t reserveSend(void** window, size_t want) override { return reserveOn(out_, window, want); }
  void commitSend(size_t bytes) override {
    out_.commit(bytes);
    peerBell_->ring();
  }
  size_t peekRecv(const void** window) override { return peekOn(in_, window); }
  void consumeRecv(size_t bytes) override {
    in_.consume(bytes);
    peerBell_->ring();
  }
  bool ringsDoorbell() const override { return true; }

  bool peerReads() const override { return true; }
  int peerPid() const override { return peerPid_; }
  uint64_t peerReadsDone() override {
    return send_->header()->readsDone.load(std::memory_order_acquire);
  }
  void peerReadDone() override {
    recv_->header()->readsDone.fetch_add(1, std::memory_order_release);
    peerBell_->ring();
  }

  bool payloadLane() const override { return split_; }
  size_t reserveSendPayload(void** window, size_t want) override {
    return split_ ? reserveOn(outLane_, window, want) : reserveSend(window, want);
  }
  void commitSendPayload(size_t bytes) override {
    if (!split_) return commitSend(bytes);
    outLane_.commit(bytes);
    peerBell_->ring();
  }
  size_t peekRecvPayload(const void** window) override {
    return peerSplit_ ? peekOn(inLane_, window) : peekRecv(window);
  }
  void consumeRecvPayload(size_t bytes) override {
    if (!peerSplit_) return consumeRecv(bytes);
    inLane_.consume(bytes);
    peerBell_->ring();
  }

  bool progress() override { return false; }  // the peer writes straight into our mapping

  std::string peerGone() override {
    if (peerClosedFlag()) return "closed its end";
    if (peerPid_ != static_cast<int>(getpid()) && watch_.dead()) {
      return strCat("process ", peerPid_, " died");
    }
    return "";
  }

  void leaveNote(const std::string& why) override {
    Header* h = send_->header();
    if (h->noteBytes.load(std::memory_order_relaxed) != 0 || why.empty()) return;
    const size_t n = std::min(why.size(), kMaxNote);
    std::memcpy(h->note, why.data(), n);
    h->noteBytes.store(static_cast<uint32_t>(n), std::memory_order_release);
  }

  std::string peerNote() override {
    const Header* h = recv_->header();
    const size_t n = std::min<size_t>(h->noteBytes.load(std::memory_order_acquire), kMaxNote);
    return std::string(h->note, n);
  }

  void sendBeat() override { send_->header()->beat.fetch_add(1, std::memory_order_relaxed); }

  // Life = a new beat, or the peer moved bytes in either direction (it produced into our
  // incoming ring or consumed from our outgoing one).
  bool heardFromPeer(std::string* note) override {
    const Header* in = recv_->header();
    const Header* out = send_->header();
    const uint64_t seen[6] = {in->beat.load(std::memory_order_relaxed),
                              in->head.load(std::memory_order_relaxed),
                              in->laneHead.load(std::memory_order_relaxed),
                              out->tail.load(std::memory_order_relaxed),
                              out->laneTail.load(std::memory_order_relaxed),
                              out->readsDone.load(std::memory_order_relaxed)};
    const bool heard = std::memcmp(seen, lastSeen_, sizeof(seen)) != 0;
    std::memcpy(lastSeen_, seen, sizeof(seen));
    if (!heard && peerPid_ != static_cast<int>(getpid())) {
      const char state = processState(peerPid_);
      if (state == 'T' || state == 't') {
        *note = strCat("process ", peerPid_, " is stopped (SIGSTOP or a debugger)");
      } else if (state != 'Z' && state != 'X' && processHasRunnableThread(peerPid_)) {
        // Alive and waiting for a core (ranks outnumber cores): the kernel is the better
        // witness on one host, and a descheduled peer is not a failed one.
        if (!descheduledSaid_) {
          XCCL_INFO(NET, "rank ", rank_, ": rank ", peer_, " (pid ", peerPid_,
                    ") sent no heartbeat but has a runnable thread: descheduled, not silent");
          descheduledSaid_ = true;
        }
        return true;
      }
    }
    return heard;
  }

  void close() override {
    if (closed_.exchange(true)) return;
    send_->header()->closed[kCreator].store(1, std::memory_order_release);
    recv_->header()->closed[kOpener].store(1, std::memory_order_release);
    peerBell_->ring();  // a sleeping peer notices at once
  }

  const char* kind() const override { return "SHM"; }
  size_t ownedSharedBytes() const override {
    return (send_->owned() ? send_->mappedBytes() : 0) +
           (send_->lane() != nullptr ? send_->header()->laneBytes : 0);
  }
  int peer() const override { return peer_; }

 private:
  size_t reserveOn(RingEnd& r, void** window, size_t want) {
    uint64_t used = 0;
    size_t n = r.reserve(window, want, &used);
    if (used > r.size()) corrupt("send", used);
    return n;
  }
  size_t peekOn(RingEnd& r, const void** window) {
    uint64_t avail = 0;
    size_t n = r.peek(window, &avail);
    if (avail > r.size()) corrupt("receive", avail);
    return n;
  }

  bool peerClosedFlag() const {
    return send_->header()->closed[kOpener].load(std::memory_order_acquire) != 0 ||
           recv_->header()->closed[kCreator].load(std::memory_order_acquire) != 0;
  }

  [[noreturn]] void corrupt(const char* dir, uint64_t value) const {
    throw RemoteError(strCat("rank ", rank_, ": SHM ", dir, " ring with rank ", peer_,
                             " is corrupt (", value, " bytes in flight)"));
  }

  int rank_, peer_, peerPid_;
  std::unique_ptr<Segment> send_, recv_;
  Device& device_;
  std::unique_ptr<Doorbell> peerBell_;
  ProcessWatch watch_;
  RingEnd out_, in_, outLane_, inLane_;
  const bool split_, peerSplit_;
  std::atomic<bool> closed_{false};
  uint64_t lastSeen_[6] = {0, 0, 0, 0, 0, 0};  // heartbeat thread only
  bool descheduledSaid_ = false;               // heartbeat thread only
};

}  // namespace

std::unique_ptr<Connection> makeConnection(int rank, int peer, int peerPid, OutgoingRing& out,
                                           const std::string& peerDesc, const std::string& secret,
                                           Device& device, std::unique_ptr<Doorbell> peerBell) {
  std::unique_ptr<Segment> recv = openPeerRing(rank, peer, peerDesc, secret, device);
  XCCL_INFO(SHM, "rank ", rank, " <- ", peer, ": mapped ", recv->ringBytes(), "-byte ring of pid ",
            peerPid,
            recv->lane() ? strCat(" and its ", recv->header()->laneBytes, "-byte payload lane in ",
                                  device.name(), " memory")
                         : std::string());
  return std::make_unique<ShmConnection>(rank, peer, peerPid, out.take(), std::move(recv), device,
                                         std::move(peerBell));
}

std::unique_ptr<Connection> makeShmConnection(int rank, int peer, int peerPid,
                                              std::unique_ptr<Segment> send,
                                              std::unique_ptr<Segment> recv, Device& device,
                                              std::unique_ptr<Doorbell> peerBell) {
  return std::make_unique<ShmConnection>(rank, peer, peerPid, std::move(send), std::move(recv),
                                         device, std::move(peerBell));
}

}  // namespace shm
}  // namespace xccl
