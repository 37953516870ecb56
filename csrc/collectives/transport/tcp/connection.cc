#include "connection.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "device/device.h"

namespace xccl {
namespace tcp {

// Bytes in each user-space socket ring (one send, one receive per peer); multiple of 64.
XCCL_PARAM(SocketBuffsize, "SOCKET_BUFFSIZE", 4 << 20)

namespace {

constexpr char kHelloMagic[4] = {'X', 'C', 'T', 'H'};
constexpr char kReplyMagic[4] = {'X', 'C', 'T', 'R'};
constexpr uint32_t kVersion = 1;
constexpr size_t kMaxSecret = 128;
constexpr size_t kHelloBytes = 4 + 4 * 4 + kMaxSecret;
constexpr size_t kReplyBytes = 12;
constexpr int kHandshakeMs = 5000;   // an accepted socket must say hello within this
constexpr int kCloseFlushMs = 2000;  // close() waits at most this long for unsent bytes
constexpr int kCloseStallMs = 200;   // ... or this long without any of them leaving
enum Status : uint32_t { kOk = 0, kBadSecret = 1, kBadRank = 2 };

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

class TcpConnection : public Connection {
 public:
  TcpConnection(int rank, int peer, std::string addr, net::Fd fd, Device& device)
      : rank_(rank), peer_(peer), addr_(std::move(addr)), fd_(std::move(fd)), device_(device) {
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
    close();
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
          pollfd p{fd_.get(), POLLOUT, 0};
          ::poll(&p, 1, 10);
        }
      }
    } catch (const std::exception&) {
      // the peer is gone: nothing more to deliver
    }
    ::shutdown(fd_.get(), SHUT_WR);
  }

  const char* kind() const override { return "TCP"; }
  int peer() const override { return peer_; }

 private:
  std::string who() const {
    return strCat("rank ", rank_, ": connection to rank ", peer_, " (", addr_, ")");
  }

  // Ring -> socket. Returns true when bytes left.
  bool flush() {
    bool moved = false;
    while (send_.used() != 0 && !sendBroken_) {
      size_t pos = static_cast<size_t>(send_.tail % send_.size);
      size_t n = std::min(send_.used(), send_.size - pos);
      ssize_t got = ::send(fd_.get(), send_.data + pos, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (got > 0) {
        send_.tail += static_cast<uint64_t>(got);
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
    return moved;
  }

  // Socket -> ring. Returns true when bytes arrived; notes EOF/reset in recvDone_.
  bool fill() {
    bool moved = false;
    while (!recvDone_ && recv_.used() < recv_.size) {
      size_t pos = static_cast<size_t>(recv_.h() % recv_.size);
      size_t n = std::min(recv_.size - recv_.used(), recv_.size - pos);
      ssize_t got = ::recv(fd_.get(), recv_.data + pos, n, MSG_DONTWAIT);
      if (got > 0) {
        recv_.advanceHead(static_cast<uint64_t>(got));
        moved = true;
        continue;
      }
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (got < 0 && errno == EINTR) continue;
      recvDone_ = true;
      if (goneWhy_.empty()) goneWhy_ = got == 0 ? " (EOF)" : strCat(" (recv: ", errnoString(errno), ")");
    }
    return moved;
  }

  int rank_, peer_;
  std::string addr_;
  net::Fd fd_;
  Device& device_;
  Ring send_, recv_;
  size_t reserved_ = 0, peeked_ = 0;
  bool recvDone_ = false;   // EOF or error reading: the peer sent all it ever will
  bool sendBroken_ = false;  // EPIPE / reset writing: the peer reads no more
  std::string goneWhy_;
  std::mutex ioMu_;  // progress() vs close()
  bool closed_ = false;
};

std::string makeHello(int from, int to, const std::string& secret) {
  std::string h(kHelloMagic, 4);
  net::putU32(h, kVersion);
  net::putU32(h, static_cast<uint32_t>(from));
  net::putU32(h, static_cast<uint32_t>(to));
  net::putU32(h, static_cast<uint32_t>(secret.size()));
  h += secret;
  h.resize(kHelloBytes, '\0');
  return h;
}

std::string makeReply(Status status, int rank) {
  std::string r(kReplyMagic, 4);
  net::putU32(r, status);
  net::putU32(r, static_cast<uint32_t>(rank));
  return r;
}

// An accepted socket whose handshake has not fully arrived.
struct Pending {
  net::Fd fd;
  std::string addr;
  std::string hello;
  Clock::time_point since = Clock::now();
};

// Checks a complete hello. Returns the sender's rank, or -1 after logging the refusal
// (and answering it, best effort, so a misconfigured rank learns why).
int verifyHello(Pending& p, int rank, const std::set<int>& from, const std::string& secret) {
  const auto* b = reinterpret_cast<const unsigned char*>(p.hello.data());
  auto refuse = [&](Status status, const std::string& why) {
    XCCL_WARN(NET, "rank ", rank, ": refused connection from ", p.addr, ": ", why);
    if (status != kOk) {
      std::string r = makeReply(status, rank);
      ::send(p.fd.get(), r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return -1;
  };
  if (std::memcmp(b, kHelloMagic, 4) != 0 || net::getU32(b + 4) != kVersion) {
    return refuse(kOk, "bad handshake (not an xccl peer, or another version)");
  }
  uint32_t len = net::getU32(b + 16);
  std::string theirs = len <= kMaxSecret ? p.hello.substr(20, len) : std::string();
  if (!net::constantTimeEqual(theirs, secret)) return refuse(kBadSecret, "bad secret");
  int src = static_cast<int>(net::getU32(b + 8));
  int dst = static_cast<int>(net::getU32(b + 12));
  if (dst != rank || !from.count(src)) {
    return refuse(kBadRank, strCat("unexpected ranks ", src, " -> ", dst));
  }
  return src;
}

}  // namespace

Listener::Listener(const sockaddr_in& addr) : fd_(net::listenOn(addr)) {
  address_ = net::formatAddr(net::boundAddr(fd_.get()));
}

std::map<int, std::unique_ptr<Connection>> Listener::acceptPeers(int rank, std::set<int> from,
                                                                 const std::string& secret,
                                                                 Device& device,
                                                                 const net::WaitCtx& ctx) {
  std::map<int, std::unique_ptr<Connection>> out;
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  while (!from.empty()) {
    fds.assign(1, pollfd{fd_.get(), POLLIN, 0});
    for (auto& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    if (ctx.abortFlag && ctx.abortFlag->load()) throw InvalidUsage(strCat(ctx.what, ": aborted"));
    if (ctx.deadline.expired()) {
      throw Timeout(strCat(ctx.what, ": timed out after ", ctx.deadline.budgetMs(),
                           " ms; still missing ", from.size(), " rank(s), e.g. rank ",
                           *from.begin()));
    }
    int n = ::poll(fds.data(), fds.size(), 50);
    if (n < 0 && errno != EINTR) XCCL_SYSCHECK(n, strCat(ctx.what, ": poll"));
    for (size_t i = pending.size(); i-- > 0;) {
      Pending& p = pending[i];
      bool drop = false;
      if (fds[i + 1].revents) {
        char buf[kHelloBytes];
        ssize_t got = ::recv(p.fd.get(), buf, kHelloBytes - p.hello.size(), MSG_DONTWAIT);
        if (got > 0) {
          p.hello.append(buf, static_cast<size_t>(got));
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          XCCL_WARN(NET, "rank ", rank, ": refused connection from ", p.addr,
                    ": closed during handshake (", p.hello.size(), " of ", kHelloBytes, " bytes)");
          drop = true;
        }
      }
      if (!drop && p.hello.size() == kHelloBytes) {
        int src = verifyHello(p, rank, from, secret);
        if (src >= 0) {
          std::string reply = makeReply(kOk, rank);
          net::sendAll(p.fd.get(), reply.data(), reply.size(), ctx);
          net::setNonblockingNoDelay(p.fd.get());
          std::string addr = p.addr;
          out[src] = std::make_unique<TcpConnection>(rank, src, addr, std::move(p.fd), device);
          from.erase(src);
        }
        drop = true;
      } else if (!drop && Clock::now() - p.since > std::chrono::milliseconds(kHandshakeMs)) {
        XCCL_WARN(NET, "rank ", rank, ": refused connection from ", p.addr,
                  ": no handshake within ", kHandshakeMs, " ms");
        drop = true;
      }
      if (drop) pending.erase(pending.begin() + static_cast<long>(i));
    }
    if (fds[0].revents & POLLIN) {
      for (;;) {
        int fd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        Pending p;
        p.fd.reset(fd);
        p.addr = net::peerAddrOf(fd);
        pending.push_back(std::move(p));
      }
    }
  }
  return out;
}

std::unique_ptr<Connection> connectPeer(int rank, int peer, const std::string& peerAddr,
                                        const std::string& secret, Device& device,
                                        const net::WaitCtx& ctx) {
  XCCL_CHECK(secret.size() <= kMaxSecret, "secret of ", secret.size(), " bytes is too long");
  net::Fd fd = net::connectTo(net::parseAddr(peerAddr), ctx);
  std::string hello = makeHello(rank, peer, secret);
  net::sendAll(fd.get(), hello.data(), hello.size(), ctx);
  unsigned char reply[kReplyBytes];
  net::recvAll(fd.get(), reply, kReplyBytes, ctx);
  uint32_t status = net::getU32(reply + 4);
  int who = static_cast<int>(net::getU32(reply + 8));
  if (std::memcmp(reply, kReplyMagic, 4) != 0 || who != peer) {
    throw RemoteError(strCat(ctx.what, ": bad handshake reply (is ", peerAddr, " an xccl rank?)"));
  }
  if (status != kOk) {
    throw RemoteError(
        strCat(ctx.what, ": refused by peer: ",
               status == kBadSecret ? "bad secret (another communicator?)" : "unexpected rank"));
  }
  return std::make_unique<TcpConnection>(rank, peer, peerAddr, std::move(fd), device);
}

}  // namespace tcp
}  // namespace xccl
