// TCP pairs connected on first use (connection.h): the higher rank's Acceptor thread, and
// the Connection the engine holds from the pair's first use, which becomes the real one
// when the handshake is done.
//
// Why this cannot deadlock: only the lower rank of a pair connects, and its handshake is
// answered by the peer's Acceptor thread, which never waits for anything the peer's
// operations do; the higher rank never blocks for the pair at all (its side moves no bytes
// until the connection arrives). Every pair an operation uses is used by both of its ranks
// in that operation, so the lower rank gets there.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/error.h"
#include "common/log.h"
#include "connection.h"

namespace xccl {
namespace tcp {

Acceptor::Acceptor(std::unique_ptr<Listener> listener, int rank, std::set<int> from,
                   std::string secret, Device& device)
    : listener_(std::move(listener)),
      rank_(rank),
      from_(std::move(from)),
      secret_(std::move(secret)),
      device_(device),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  XCCL_SYSCHECK(wake_.get(), "eventfd");
  thread_ = std::thread([this] { loop(); });
}

Acceptor::~Acceptor() {
  stop_.store(true);
  stopThread();
}

void Acceptor::stopThread() {
  const uint64_t one = 1;
  if (wake_.valid() && ::write(wake_.get(), &one, sizeof(one)) < 0) {
    // the counter is full: the thread is being woken anyway
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  if (listener_) listener_->close();
}

void Acceptor::close() {
  std::map<int, std::unique_ptr<Connection>> held;
  {
    std::lock_guard<std::mutex> g(mu_);
    closed_.store(true);
    held.swap(ready_);                     // nobody takes them any more
    if (note_.empty()) stop_.store(true);  // no reason to hand out: refuse from now on
  }
  for (auto& h : held) h.second->close();
  if (stop_.load()) stopThread();  // else it keeps accepting, to hand out the note
}

void Acceptor::leaveNote(const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  if (note_.empty()) note_ = why;
  for (auto& h : ready_) {
    try {
      h.second->leaveNote(note_);
    } catch (const std::exception&) {
    }
  }
}

std::unique_ptr<Connection> Acceptor::take(int peer) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = ready_.find(peer);
  if (it == ready_.end()) return nullptr;
  auto c = std::move(it->second);
  ready_.erase(it);
  return c;
}

void Acceptor::loop() {
  const std::string what =
      strCat("rank ", rank_, ": accepting TCP connections on first use on ", listener_->address());
  // Until the communicator closes, also when every lower rank has connected: its peers
  // probe that it still listens (a closed listener tells them the communicator is gone).
  auto lastBeat = Clock::now();
  while (!stop_.load()) {
    const int64_t beatMs = beatMs_.load();
    if (beatMs > 0 && Clock::now() - lastBeat >= std::chrono::milliseconds(beatMs)) {
      lastBeat = Clock::now();
      std::lock_guard<std::mutex> g(mu_);
      for (auto& held : ready_) {
        try {
          held.second->sendBeat();
        } catch (const std::exception&) {  // its engine will find out when it takes it
        }
      }
    }
    std::map<int, std::unique_ptr<Connection>> got;
    // Asleep until a connection or close(): one wake-up per handshake step while one is
    // under way (to time it out), per beat while it holds connections, none otherwise (many
    // ranks on few cores must not pay for idle acceptors).
    int waitMs = -1;
    if (listener_->handshaking()) {
      waitMs = 50;
    } else if (beatMs > 0) {
      std::lock_guard<std::mutex> g(mu_);
      if (!ready_.empty()) waitMs = static_cast<int>(std::min<int64_t>(beatMs, 60000));
    }
    try {
      const Deadline handshake = Deadline::after(5000);
      net::WaitCtx ctx{handshake, &stop_, what};
      listener_->acceptStep(rank_, &from_, secret_, device_, ctx, waitMs, &got, wake_.get());
    } catch (const std::exception& e) {  // one socket's trouble; the listener goes on
      if (stop_.load()) break;
      XCCL_WARN(NET, what, ": ", e.what());
    }
    if (got.empty()) continue;
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [p, c] : got) {
      if (!closed_.load()) {
        ready_[p] = std::move(c);
        continue;
      }
      try {  // the communicator failed: the late connector learns why, then sees us leave
        c->leaveNote(note_);
        c->close();
      } catch (const std::exception&) {
      }
    }
  }
}

namespace {

constexpr int64_t kAskEveryMs = 250;

class LazyConnection : public Connection {
 public:
  LazyConnection(int rank, int peer, std::string peerAddr, std::string secret, Device& device,
                 Acceptor* acceptor, int64_t connectMs, std::function<std::string()> peerLost)
      : rank_(rank),
        peer_(peer),
        peerAddr_(std::move(peerAddr)),
        secret_(std::move(secret)),
        device_(device),
        acceptor_(acceptor),
        connectMs_(connectMs),
        peerLost_(std::move(peerLost)) {}
  ~LazyConnection() override { LazyConnection::close(); }  // no dispatch in a destructor

  size_t reserveSend(void** window, size_t want) override {
    return ready() ? inner_->reserveSend(window, want) : 0;
  }
  // Before the connection there is no window, so nothing to publish (0 bytes).
  void commitSend(size_t bytes) override {
    if (inner_) inner_->commitSend(bytes);
  }
  size_t peekRecv(const void** window) override { return ready() ? inner_->peekRecv(window) : 0; }
  void consumeRecv(size_t bytes) override {
    if (inner_) inner_->consumeRecv(bytes);
  }
  bool progress() override { return ready() && inner_->progress(); }
  bool sendPending() override { return inner_ && inner_->sendPending(); }
  std::string peerGone() override {
    if (inner_) return inner_->peerGone();
    ready();
    return lost_;
  }
  void close() override {
    closed_.store(true);
    if (Connection* c = live_.load()) c->close();
  }
  const char* kind() const override { return "TCP"; }
  int peer() const override { return peer_; }
  bool connected() const override { return live_.load() != nullptr; }
  void leaveNote(const std::string& why) override {
    if (Connection* c = live_.load()) c->leaveNote(why);
  }
  std::string peerNote() override {
    Connection* c = live_.load();
    return c ? c->peerNote() : "";
  }
  int noteLagMs() const override {
    Connection* c = live_.load();
    return c ? c->noteLagMs() : 0;
  }
  // The heartbeat thread: nothing to beat on before the sockets exist, and no verdict
  // either (waiting, the engine asks peerLost instead).
  void sendBeat() override {
    if (Connection* c = live_.load()) c->sendBeat();
  }
  bool heardFromPeer(std::string* note) override {
    Connection* c = live_.load();
    return c == nullptr || c->heardFromPeer(note);
  }

 private:
  // Whether the real connection is there; makes or takes it when it can (engine thread).
  bool ready() {
    if (inner_) return true;
    if (closed_.load() || !lost_.empty()) return false;
    if (rank_ < peer_) {
      const Deadline deadline = Deadline::after(connectMs_);
      net::WaitCtx ctx{deadline, nullptr,
                       strCat("rank ", rank_, ": TCP connect on first use to rank ", peer_, " (",
                              peerAddr_, ")")};
      try {
        inner_ = connectPeer(rank_, peer_, peerAddr_, secret_, device_, ctx,
                             /*peerListening=*/true);
      } catch (const Error& e) {
        lost_ =
            strCat("could not be reached for the pair's first use (", e.what(),
                   e.kind() == ErrorKind::kTimeout ? "; its process stopped or cut off?" : "", ")");
        return false;
      }
    } else {
      inner_ = acceptor_ != nullptr ? acceptor_->take(peer_) : nullptr;
      if (!inner_) {
        const auto now = Clock::now();
        if (now - lastAsked_ >= std::chrono::milliseconds(kAskEveryMs)) {
          lastAsked_ = now;
          const std::string why = askAfterPeer();
          if (!why.empty()) lost_ = strCat("left before it connected the pair (", why, ")");
        }
        return false;
      }
    }
    XCCL_INFO(INIT, "rank ", rank_, " -> ", peer_, " via TCP ", peerAddr_,
              ", connected on first use");
    live_.store(inner_.get());
    if (closed_.load()) inner_->close();
    return true;
  }

  // Waiting for the lower rank: does its communicator still listen (a closed listener: it
  // was destroyed or aborted, or the process exited), and is its process there (peerLost_:
  // gone, or silent too long)? "" = no verdict.
  std::string askAfterPeer() {
    const Deadline deadline = Deadline::after(100);
    net::WaitCtx ctx{deadline, nullptr,
                     strCat("rank ", rank_, ": waiting for rank ", peer_,
                            " to connect on first use; its listener ", peerAddr_)};
    try {
      net::connectOnce(net::parseAddr(peerAddr_), ctx);  // closed at once: a probe
    } catch (const RemoteError& e) {
      return e.what();
    } catch (const Error&) {  // no answer in time, or no route: no verdict here
    }
    return peerLost_ ? peerLost_() : "";
  }

  const int rank_, peer_;
  const std::string peerAddr_, secret_;
  Device& device_;
  Acceptor* acceptor_;
  const int64_t connectMs_;
  std::function<std::string()> peerLost_;
  std::unique_ptr<Connection> inner_;       // the engine thread's
  std::atomic<Connection*> live_{nullptr};  // the same, for other threads
  std::atomic<bool> closed_{false};
  std::string lost_;
  Clock::time_point lastAsked_{};
};

}  // namespace

void deliverNote(int rank, int peer, const std::string& peerAddr, const std::string& secret,
                 Device& device, int64_t connectMs, const std::string& why) {
  try {
    const Deadline deadline = Deadline::after(connectMs);
    net::WaitCtx ctx{deadline, nullptr,
                     strCat("rank ", rank, ": leaving rank ", peer, " the reason of a failure")};
    auto c = connectPeer(rank, peer, peerAddr, secret, device, ctx, /*peerListening=*/true);
    c->leaveNote(why);
    c->close();
  } catch (const std::exception&) {  // it is gone too, or its communicator is: nothing to tell
  }
}

std::unique_ptr<Connection> makeLazyConnection(int rank, int peer, const std::string& peerAddr,
                                               const std::string& secret, Device& device,
                                               Acceptor* acceptor, int64_t connectMs,
                                               std::function<std::string()> peerLost) {
  return std::make_unique<LazyConnection>(rank, peer, peerAddr, secret, device, acceptor, connectMs,
                                          std::move(peerLost));
}

}  // namespace tcp
}  // namespace xccl
