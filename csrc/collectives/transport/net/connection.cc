// The Connection over a network plugin (connection.h); the set-up of its pairs is listener.cc.
#include "connection.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "collectives/device/device.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "plugin.h"

namespace xccl::net {

// Bytes of each direction's buffering through a network plugin (the send ring; the receive
// slots together), and the largest message posted.
XCCL_PARAM(NetBuffSize, "NET_BUFFSIZE", 4 << 20, 1 << 12, 1LL << 30)
XCCL_PARAM(NetChunk, "NET_CHUNK", 512 << 10, 1 << 10, 1 << 28)

namespace {

constexpr size_t kRoom = 64;  // in front of each receive slot: a split header's first part
constexpr int kMaxSendsInFlight = 16;

size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

class NetConnection final : public Connection {
 public:
  NetConnection(const xcclNet_v1_t* net, int rank, int peer, std::string name, void* sendComm,
                void* recvComm, Device& device)
      : net_(net),
        rank_(rank),
        peer_(peer),
        name_(std::move(name)),
        sendComm_(sendComm),
        recvComm_(recvComm),
        device_(device) {
    chunk_ = roundUp(static_cast<size_t>(xcclParamNetChunk()), kRoom);
    ringBytes_ =
        roundUp(std::max<size_t>(static_cast<size_t>(xcclParamNetBuffSize()), chunk_), chunk_);
    nslots_ = std::max<size_t>(2, ringBytes_ / chunk_);
    sring_ = static_cast<unsigned char*>(std::aligned_alloc(kRoom, ringBytes_));
    slotStride_ = kRoom + chunk_;
    slotsMem_ = static_cast<unsigned char*>(std::aligned_alloc(kRoom, nslots_ * slotStride_));
    if (sring_ == nullptr || slotsMem_ == nullptr) {
      std::free(sring_);
      std::free(slotsMem_);
      throw IoError(strCat("rank ", rank_, ": no memory for the rings to rank ", peer_));
    }
    device_.registerStaging(sring_, ringBytes_);
    device_.registerStaging(slotsMem_, nslots_ * slotStride_);
    try {
      check(net_->regMr(sendComm_, sring_, ringBytes_, XCCL_NET_PTR_HOST, &sendMr_), net_->name,
            "regMr (send ring)");
      check(net_->regMr(recvComm_, slotsMem_, nslots_ * slotStride_, XCCL_NET_PTR_HOST, &recvMr_),
            net_->name, "regMr (receive slots)");
      slots_.resize(nslots_);
      for (size_t i = 0; i < nslots_; ++i) {
        slots_[i].data = slotsMem_ + i * slotStride_ + kRoom;
        post(slots_[i]);
      }
    } catch (...) {
      close();
      device_.unregisterStaging(sring_);
      device_.unregisterStaging(slotsMem_);
      std::free(sring_);
      std::free(slotsMem_);
      throw;
    }
  }

  ~NetConnection() override {
    XCCL_INFO(NET, "rank ", rank_, " <-> ", peer_, " through the ", net_->name,
              " network plugin: ", messagesSent_, " messages sent, ", messagesReceived_,
              " received, ", tailsJoined_, " short tails joined to the next message");
    close();
    device_.unregisterStaging(sring_);
    device_.unregisterStaging(slotsMem_);
    if (keepRings_) {
      XCCL_INFO(NET, "rank ", rank_, " <-> ", peer_, ": the ", net_->name,
                " plugin may still use this pair's buffers after closing it; ",
                (ringBytes_ + nslots_ * slotStride_) >> 10, " KiB kept until exit");
      return;
    }
    std::free(sring_);
    std::free(slotsMem_);
  }

  size_t reserveSend(void** window, size_t want) override {
    const size_t used = static_cast<size_t>(committed_ - released_);
    const size_t off = static_cast<size_t>(committed_ % ringBytes_);
    const size_t n = std::min({want, ringBytes_ - used, ringBytes_ - off});
    *window = sring_ + off;
    return n;
  }

  // Posted at once, as TCP flushes on commit: a peer must not wait for this rank's next pass.
  void commitSend(size_t bytes) override {
    committed_ += bytes;
    if (gone_.empty()) {
      try {
        postSends();
      } catch (const RemoteError& e) {
        gone_ = e.what();
      }
    }
  }

  size_t peekRecv(const void** window) override {
    for (;;) {
      Slot& s = slots_[head_];
      if (s.state != Slot::kFull) return 0;
      const size_t left = s.size - s.consumed + s.front;
      if (left == 0) {  // an empty message, or read to its end
        advance();
        continue;
      }
      // A short tail: join it to the next slot's bytes when those are in, so a split
      // header or element reads as one window.
      Slot& next = slots_[(head_ + 1) % nslots_];
      if (left < kRoom && next.state == Slot::kFull && next.consumed == 0 && next.front == 0 &&
          next.size > 0) {
        memmove(next.data - left, s.data + s.consumed - s.front, left);
        next.front = left;
        ++tailsJoined_;
        s.consumed = s.size;
        s.front = 0;
        advance();
        continue;
      }
      *window = s.data + s.consumed - s.front;
      return left;
    }
  }

  void consumeRecv(size_t bytes) override {
    Slot& s = slots_[head_];
    const size_t fromFront = std::min(bytes, s.front);
    s.front -= fromFront;
    s.consumed += bytes - fromFront;
    if (s.front == 0 && s.consumed == s.size) advance();
  }

  bool progress() override {
    if (!gone_.empty()) return false;
    bool moved = false;
    try {
      // Sends: release completed ones in order, then post what was committed.
      while (!sends_.empty()) {
        int done = 0;
        size_t n = 0;
        if (!call(net_->test(sends_.front().req, &done, &n), "test (send)") || !done) break;
        released_ += sends_.front().bytes;
        sends_.pop_front();
        moved = true;
      }
      moved |= postSends();
      // Receives: the slots complete in order; post again those read (or refused before).
      for (size_t k = 0; k < nslots_; ++k) {
        Slot& s = slots_[(head_ + k) % nslots_];
        if (s.state == Slot::kIdle) post(s);
        if (s.state != Slot::kPosted) {
          if (s.state == Slot::kIdle) break;
          continue;
        }
        int done = 0;
        size_t n = 0;
        if (!call(net_->test(s.req, &done, &n), "test (receive)") || !done) break;
        s.state = Slot::kFull;
        ++messagesReceived_;
        s.size = n;
        s.consumed = 0;
        s.req = nullptr;
        moved = true;
      }
    } catch (const RemoteError& e) {
      gone_ = e.what();
    }
    return moved;
  }

  bool sendPending() override { return committed_ != released_; }

  std::string peerGone() override {
    if (gone_.empty()) progress();
    return gone_;
  }

  void close() override {
    // Abandoned requests may still touch the rings (xcclInProgress): then they are kept
    // until the process exits, as the ABI asks. A close releases the comm's registrations.
    if (sendComm_ != nullptr) {
      if (net_->closeSend(sendComm_) == xcclInProgress) keepRings_ = true;
      sendComm_ = nullptr;
    }
    if (recvComm_ != nullptr) {
      if (net_->closeRecv(recvComm_) == xcclInProgress) keepRings_ = true;
      recvComm_ = nullptr;
    }
    if (gone_.empty()) gone_ = "closed locally";
  }

  const char* kind() const override { return "NET"; }
  int peer() const override { return peer_; }

 private:
  struct Slot {
    enum State { kIdle, kPosted, kFull } state = kIdle;
    unsigned char* data = nullptr;
    void* req = nullptr;
    size_t size = 0;      // bytes the message brought
    size_t consumed = 0;  // of those, read
    size_t front = 0;     // bytes of the slot before moved into the room in front
  };
  struct Send {
    void* req;
    size_t bytes;
  };

  // Posts what was committed and not yet posted (messages of at most a chunk, never across
  // the ring's end, a bounded number in flight). Whether anything was posted.
  bool postSends() {
    bool posted = false;
    while (posted_ < committed_ && static_cast<int>(sends_.size()) < kMaxSendsInFlight) {
      const size_t off = static_cast<size_t>(posted_ % ringBytes_);
      const size_t n = std::min<size_t>({committed_ - posted_, chunk_, ringBytes_ - off});
      void* req = nullptr;
      if (!call(net_->isend(sendComm_, sring_ + off, n, sendMr_, &req), "isend") ||
          req == nullptr) {
        break;
      }
      sends_.push_back({req, n});
      posted_ += n;
      ++messagesSent_;
      posted = true;
    }
    return posted;
  }

  // A plugin result: true on success; a remote failure is recorded (the peer is gone for
  // this pair); anything else is this side's fault and thrown.
  bool call(xcclResult_t r, const char* what) {
    if (r == xcclSuccess) return true;
    if (r == xcclRemoteError) {
      if (gone_.empty()) {
        gone_ = strCat("rank ", peer_, " (", name_, " through the ", net_->name,
                       " network plugin) ", what, " failed: the peer closed or left");
      }
      return false;
    }
    check(r, net_->name, what);
    return false;
  }

  void post(Slot& s) {
    if (recvComm_ == nullptr || !gone_.empty()) return;
    void* req = nullptr;
    if (!call(net_->irecv(recvComm_, s.data, chunk_, recvMr_, &req), "irecv") || req == nullptr)
      return;
    s.req = req;
    s.state = Slot::kPosted;
  }

  void advance() {
    Slot& s = slots_[head_];
    s.state = Slot::kIdle;
    s.size = s.consumed = s.front = 0;
    head_ = (head_ + 1) % nslots_;
    post(s);
  }

  const xcclNet_v1_t* net_;
  int rank_, peer_;
  std::string name_;
  void* sendComm_;
  void* recvComm_;
  Device& device_;
  void* sendMr_ = nullptr;
  void* recvMr_ = nullptr;
  size_t chunk_ = 0, ringBytes_ = 0, nslots_ = 0, slotStride_ = 0;
  unsigned char* sring_ = nullptr;
  unsigned char* slotsMem_ = nullptr;
  uint64_t committed_ = 0, posted_ = 0, released_ = 0;
  std::deque<Send> sends_;
  std::vector<Slot> slots_;
  size_t head_ = 0;
  std::string gone_;
  uint64_t messagesSent_ = 0, messagesReceived_ = 0, tailsJoined_ = 0;
  bool keepRings_ = false;
};

}  // namespace

std::unique_ptr<Connection> makeNetConnection(const xcclNet_v1_t* table, int rank, int peer,
                                              std::string name, void* sendComm, void* recvComm,
                                              Device& device) {
  return std::make_unique<NetConnection>(table, rank, peer, std::move(name), sendComm, recvComm,
                                         device);
}

}  // namespace xccl::net
