// The connection data path (stream.h): rings <-> sockets, the striping, the heartbeat
// socket (beats and a failing rank's note) and a bounded flush on close.
#include "stream.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "collectives/device/device.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "handshake.h"

namespace xccl {
namespace tcp {

// Bytes in each user-space socket ring (one send, one receive per peer); multiple of 64.
XCCL_PARAM(SocketBuffsize, "SOCKET_BUFFSIZE", 4 << 20, 256, 1 << 30)

namespace {

constexpr int kCloseFlushMs = 2000;           // close() waits at most this long for unsent bytes
constexpr int kCloseStallMs = 200;            // ... or this long without any of them leaving
constexpr uint64_t kNoteMark = ~uint64_t{0};  // on the heartbeat socket: a note follows
constexpr size_t kMaxNote = 1024;

// A byte ring in ordinary (page-aligned) memory; counters only grow. `head` is atomic
// because close() may run on another thread (abort) and must see committed bytes.
struct Ring {
  char* data = nullptr;
  size_t size = 0;
  std::atomic<uint64_t> head{0};  // bytes ever produced
  uint64_t tail = 0;              // bytes ever consumed
  size_t used() const { return static_cast<size_t>(head.load(std::memory_order_acquire) - tail); }
  uint64_t h() const { return head.load(std::memory_order_relaxed); }
  void advanceHead(uint64_t n) { head.store(h() + n, std::memory_order_release); }
};

// The byte stream striped over n sockets: chunk c (bytes [c*chunk, (c+1)*chunk)) travels on
// socket c mod n. Each socket keeps its own position in the stream (the next byte it sends
// or receives, always inside one of its chunks); the send ring is free below the lowest
// position, the receive ring holds a contiguous prefix up to the lowest position. One
// socket (n = 1) is the plain stream.
class TcpConnection : public Connection {
 public:
  // fds: the data sockets, then the heartbeat socket.
  TcpConnection(int rank, int peer, std::string addr, std::vector<net::Fd> fds, size_t chunk,
                Device& device)
      : rank_(rank),
        peer_(peer),
        addr_(std::move(addr)),
        fds_(std::move(fds)),
        chunk_(chunk),
        device_(device) {
    XCCL_CHECK(fds_.size() >= 2, "a TCP connection needs a data and a heartbeat socket");
    beat_ = std::move(fds_.back());
    fds_.pop_back();
    const size_t n = fds_.size();
    for (size_t j = 0; j < n; ++j) {
      sendNext_.push_back(j * chunk_);
      recvNext_.push_back(j * chunk_);
    }
    recvEof_.assign(n, false);
    int64_t size = xcclParamSocketBuffsize();
    XCCL_CHECK(size >= 256 && size % 64 == 0 && size <= (int64_t(1) << 30),
               "XCCL_SOCKET_BUFFSIZE=", size, " must be a multiple of 64 between 256 and 1 GiB");
    for (Ring* r : {&send_, &recv_}) {
      void* p = nullptr;
      if (posix_memalign(&p, 4096, static_cast<size_t>(size)) != 0) {
        throw IoError(strCat("rank ", rank, ": cannot allocate a ", size, "-byte socket ring"));
      }
      r->data = static_cast<char*>(p);
      r->size = static_cast<size_t>(size);
      device_.registerStaging(r->data, r->size);
    }
  }

  ~TcpConnection() override {
    TcpConnection::close();  // this class's close: no dispatch in a destructor
    for (Ring* r : {&send_, &recv_}) {
      device_.unregisterStaging(r->data);
      std::free(r->data);
    }
  }

  size_t reserveSend(void** window, size_t want) override {
    size_t pos = static_cast<size_t>(send_.h() % send_.size);
    size_t n = std::min({want, send_.size - send_.used(), send_.size - pos});
    *window = send_.data + pos;
    reserved_ = n;
    return n;
  }

  void commitSend(size_t bytes) override {
    XCCL_CHECK(bytes <= reserved_, "commitSend(", bytes, ") exceeds the reserved window of ",
               reserved_);
    reserved_ -= bytes;
    send_.advanceHead(bytes);
    // Push the bytes towards the wire now: the engine stops progressing a peer once its
    // messages are committed, and a peer waiting on bytes parked in our ring would stall.
    // Errors are left for progress() to report.
    std::unique_lock<std::mutex> lock(ioMu_, std::try_to_lock);
    if (lock.owns_lock() && !closed_) {
      try {
        flush();
      } catch (const RemoteError&) {
      }
    }
  }

  size_t peekRecv(const void** window) override {
    size_t pos = static_cast<size_t>(recv_.tail % recv_.size);
    size_t n = std::min(recv_.used(), recv_.size - pos);
    *window = recv_.data + pos;
    peeked_ = n;
    return n;
  }

  void consumeRecv(size_t bytes) override {
    XCCL_CHECK(bytes <= peeked_, "consumeRecv(", bytes, ") exceeds the peeked window of ", peeked_);
    peeked_ -= bytes;
    recv_.tail += bytes;
  }

  bool progress() override {
    std::lock_guard<std::mutex> lock(ioMu_);
    if (closed_) throw RemoteError(strCat(who(), " was closed locally"));
    bool moved = flush();
    moved |= fill();
    return moved;
  }

  // The peer left once the socket said EOF or failed; what it sent before that is in our
  // ring (fill() reads up to the EOF), so nothing it delivered is lost.
  std::string peerGone() override {
    std::lock_guard<std::mutex> lock(ioMu_);
    if (!closed_) {
      flush();
      fill();
    }
    return recvDone_ || sendBroken_ ? strCat("closed the connection", goneWhy_) : std::string();
  }

  // Bytes for a peer that has left can never leave: not pending.
  bool sendPending() override {
    std::lock_guard<std::mutex> lock(ioMu_);
    return !closed_ && !sendBroken_ && send_.used() != 0;
  }

  // The heartbeat socket carries beats (8 bytes: a counter, never kNoteMark) and, once, a
  // failing rank's note (kNoteMark, a 4-byte length, the text): the reason reaches the peer
  // even when the data stream is in the middle of a frame, where no abort frame fits.
  // Sends come from the heartbeat thread and the engine, reads from both: one mutex each.
  // When the socket's buffer is full the peer is not reading beats either: one lost is no loss.
  void sendBeat() override {
    std::lock_guard<std::mutex> g(beatSendMu_);
    const uint64_t n = ++beatsSent_;
    ::send(beat_.get(), &n, sizeof(n), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void leaveNote(const std::string& why) override {
    std::lock_guard<std::mutex> g(beatSendMu_);
    if (noteSent_ || why.empty()) return;
    noteSent_ = true;
    const uint32_t n = static_cast<uint32_t>(std::min(why.size(), kMaxNote));
    std::string frame(reinterpret_cast<const char*>(&kNoteMark), sizeof(kNoteMark));
    frame.append(reinterpret_cast<const char*>(&n), sizeof(n));
    frame.append(why.data(), n);
    ::send(beat_.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  int noteLagMs() const override { return 100; }

  std::string peerNote() override {
    std::lock_guard<std::mutex> g(beatRecvMu_);
    readBeats();
    return peerNote_;
  }

  // Life = beats arrived, or data did (fill() counts it). A heartbeat socket that reached
  // EOF or failed proves nothing either way: the data sockets tell whether the peer left.
  bool heardFromPeer(std::string* /*note*/) override {
    bool heard;
    {
      std::lock_guard<std::mutex> g(beatRecvMu_);
      heard = readBeats();
    }
    const uint64_t received = bytesReceived_.load(std::memory_order_relaxed);
    heard |= received != lastReceived_;
    lastReceived_ = received;
    return heard;
  }

  // Safe to call from another thread than the one progressing (abort): the socket is
  // shut down, not closed, so its fd number cannot be reused under a concurrent recv.
  void close() override {
    std::lock_guard<std::mutex> lock(ioMu_);
    if (closed_) return;
    closed_ = true;
    // Bytes committed by the last operation may still sit in our ring: give them a
    // bounded chance to leave so a clean shutdown does not truncate the peer's data. A
    // peer that stops reading (it is failing too) is given up on quickly.
    auto start = Clock::now(), lastMove = start;
    try {
      while (send_.used() != 0 && !sendBroken_ && !recvDone_) {
        auto now = Clock::now();
        if (now - start > std::chrono::milliseconds(kCloseFlushMs) ||
            now - lastMove > std::chrono::milliseconds(kCloseStallMs)) {
          break;
        }
        if (flush()) {
          lastMove = now;
        } else {
          std::vector<pollfd> p;
          for (auto& fd : fds_) p.push_back(pollfd{fd.get(), POLLOUT, 0});
          ::poll(p.data(), p.size(), 10);
        }
      }
    } catch (const std::exception&) {
      // the peer is gone: nothing more to deliver
    }
    for (auto& fd : fds_) ::shutdown(fd.get(), SHUT_WR);
    ::shutdown(beat_.get(), SHUT_RDWR);
  }

  const char* kind() const override { return "TCP"; }
  int peer() const override { return peer_; }

 private:
  std::string who() const {
    return strCat("rank ", rank_, ": connection to rank ", peer_, " (", addr_, ")");
  }

  // The contiguous stretch a socket at stream position `at` may move through a ring of
  // `size` bytes: up to `limit`, the end of its chunk and the ring's end. {ring offset, bytes}
  std::pair<size_t, size_t> stretch(uint64_t at, uint64_t limit, size_t size) const {
    uint64_t chunkEnd = (at / chunk_ + 1) * chunk_;
    size_t pos = static_cast<size_t>(at % size);
    return {pos, static_cast<size_t>(std::min<uint64_t>({limit - at, chunkEnd - at, size - pos}))};
  }

  // Moves a socket's position past `got` bytes; at the end of its chunk, on to its next
  // chunk, n chunks on.
  void advance(uint64_t& at, size_t got) const {
    uint64_t chunkEnd = (at / chunk_ + 1) * chunk_;
    at += got;
    if (at == chunkEnd) at += (fds_.size() - 1) * chunk_;
  }

  // Drains the heartbeat socket (caller holds beatRecvMu_) and parses beats and the note.
  // Returns whether anything arrived (or the socket ended: no verdict from it).
  bool readBeats() {
    bool heard = false;
    char buf[512];
    for (;;) {
      ssize_t got = ::recv(beat_.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (got > 0) {
        heard = true;
        beatIn_.append(buf, static_cast<size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) heard = true;
      break;
    }
    size_t pos = 0;
    while (beatIn_.size() - pos >= sizeof(uint64_t)) {
      uint64_t word;
      std::memcpy(&word, beatIn_.data() + pos, sizeof(word));
      if (word != kNoteMark) {
        pos += sizeof(word);
        continue;
      }
      uint32_t n = 0;
      if (beatIn_.size() - pos < sizeof(word) + sizeof(n)) break;
      std::memcpy(&n, beatIn_.data() + pos + sizeof(word), sizeof(n));
      n = static_cast<uint32_t>(std::min<size_t>(n, kMaxNote));
      if (beatIn_.size() - pos < sizeof(word) + sizeof(n) + n) break;
      if (peerNote_.empty()) peerNote_.assign(beatIn_.data() + pos + sizeof(word) + sizeof(n), n);
      pos += sizeof(word) + sizeof(n) + n;
    }
    beatIn_.erase(0, pos);
    return heard;
  }

  // Ring -> sockets. Returns true when bytes left.
  bool flush() {
    bool moved = false;
    const uint64_t head = send_.h();
    for (size_t j = 0; j < fds_.size() && !sendBroken_; ++j) {
      uint64_t& at = sendNext_[j];
      while (at < head) {
        auto [pos, n] = stretch(at, head, send_.size);
        ssize_t got = ::send(fds_[j].get(), send_.data + pos, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (got > 0) {
          advance(at, static_cast<size_t>(got));
          moved = true;
          continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (got < 0 && errno == EINTR) continue;
        // The peer is gone (EPIPE, reset): note it; the engine decides whether that failed
        // anything once it has read what the peer sent before leaving.
        if (goneWhy_.empty()) goneWhy_ = strCat(" (send: ", errnoString(errno), ")");
        sendBroken_ = true;
        break;
      }
    }
    uint64_t low = head;
    for (uint64_t at : sendNext_) low = std::min(low, at);
    send_.tail = low;
    return moved;
  }

  // Sockets -> ring. Returns true when bytes arrived; notes EOF/reset in recvDone_.
  bool fill() {
    bool moved = false;
    for (size_t j = 0; j < fds_.size() && !recvDone_; ++j) {
      uint64_t& at = recvNext_[j];
      while (!recvEof_[j]) {
        const uint64_t limit = recv_.tail + recv_.size;  // the ring holds [tail, tail + size)
        if (at >= limit) break;
        auto [pos, n] = stretch(at, limit, recv_.size);
        ssize_t got = ::recv(fds_[j].get(), recv_.data + pos, n, MSG_DONTWAIT);
        if (got > 0) {
          advance(at, static_cast<size_t>(got));
          bytesReceived_.fetch_add(static_cast<uint64_t>(got), std::memory_order_relaxed);
          moved = true;
          continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (got < 0 && errno == EINTR) continue;
        if (got == 0) {
          recvEof_[j] = true;  // this socket is done; the others may still hold data
          if (goneWhy_.empty()) goneWhy_ = " (EOF)";
        } else {
          recvDone_ = true;  // reset: nothing more will come
          if (goneWhy_.empty()) goneWhy_ = strCat(" (recv: ", errnoString(errno), ")");
        }
      }
    }
    if (std::all_of(recvEof_.begin(), recvEof_.end(), [](bool e) { return e; })) recvDone_ = true;
    uint64_t low = recvNext_[0];
    for (uint64_t at : recvNext_) low = std::min(low, at);
    if (low > recv_.h()) recv_.advanceHead(low - recv_.h());
    return moved;
  }

  int rank_, peer_;
  std::string addr_;
  std::vector<net::Fd> fds_;
  size_t chunk_;
  Device& device_;
  Ring send_, recv_;
  std::vector<uint64_t> sendNext_, recvNext_;  // per socket: its next byte in the stream
  std::vector<bool> recvEof_;                  // per socket: EOF seen
  size_t reserved_ = 0, peeked_ = 0;
  bool recvDone_ = false;    // EOF or error reading: the peer sent all it ever will
  bool sendBroken_ = false;  // EPIPE / reset writing: the peer reads no more
  std::string goneWhy_;
  std::mutex ioMu_;  // progress() vs close()
  bool closed_ = false;
  net::Fd beat_;  // the heartbeat socket
  std::mutex beatSendMu_, beatRecvMu_;
  uint64_t beatsSent_ = 0;                  // under beatSendMu_
  bool noteSent_ = false;                   // under beatSendMu_
  std::string beatIn_, peerNote_;           // under beatRecvMu_
  uint64_t lastReceived_ = 0;               // heartbeat thread only
  std::atomic<uint64_t> bytesReceived_{0};  // data bytes ever received (fill())
};

}  // namespace

std::unique_ptr<Connection> makeStreamConnection(int rank, int peer, std::string addr,
                                                 std::vector<net::Fd> fds, size_t chunk,
                                                 Device& device) {
  return std::make_unique<TcpConnection>(rank, peer, std::move(addr), std::move(fds), chunk,
                                         device);
}

}  // namespace tcp
}  // namespace xccl
