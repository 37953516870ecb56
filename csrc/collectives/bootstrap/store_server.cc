// The store server of the unique-id rendezvous and of every process's bootstrap service:
// one thread, poll() over nonblocking sockets, the wire protocol of unique_id.cc (hello and
// proof, then set / get / take, a get or take of an absent key parked until a set brings it
// or its wait is up). Split from the client side, which lives in unique_id.cc.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "bootstrap_internal.h"
#include "collectives/transport/tcp/socket.h"
#include "common/auth.h"
#include "common/error.h"
#include "common/log.h"

namespace xccl {
namespace {

using namespace storewire;  // NOLINT: the wire's constants, shared with unique_id.cc

constexpr int kHelloTimeoutMs = 10000;  // a client that never says hello is dropped
static_assert(kHelloBytes == 8 + auth::kNonceBytes, "the hello carries one nonce");

struct Client {
  net::Fd fd;
  std::string addr;
  bool authed = false;
  std::string nonce;  // ours, once the hello is answered: then the proof is awaited
  std::string theirNonce;
  Clock::time_point since = Clock::now();
  std::string in, out;
  // A get or take waiting for its key (until `until`); nothing more is read meanwhile.
  bool parked = false, parkedTake = false;
  std::string parkedKey;
  Clock::time_point until;
  bool closing = false;  // found broken while serving another client: closed on the next pass
};

enum class Parse { kNeedMore, kDone, kBad };

class StoreServer {
 public:
  // forever: never retire (the process's bootstrap service); otherwise retire once every
  // rank of the unique-id rendezvous is done.
  StoreServer(net::Fd listener, std::string secret, bool forever = false)
      : listener_(std::move(listener)), secret_(std::move(secret)), forever_(forever) {}

  void run();

 private:
  void acceptAll();
  bool readClient(Client& c);  // false: close it
  bool drain(Client& c);       // handles the complete requests buffered; false: close it
  bool flushClient(Client& c);
  Parse handleOne(Client& c, std::string* why);
  // Answers a get/take of `key` from the store (0 | len | value) or absent (1).
  void answer(Client& c, const std::string& key, bool take);
  void wake(const std::string& key);  // answers the requests parked on `key`
  void expireParked();                // answers "absent" to those whose time is up
  int pollTimeoutMs() const;
  Parse handleHello(Client& c, std::string* why);
  bool finished() const;

  net::Fd listener_;
  std::string secret_;  // raw bytes
  bool forever_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::map<std::string, std::string> kv_;
  std::set<std::string> doneKeys_;
  long nranks_ = 0;                                    // learned from the done marks
  uint64_t requests_ = 0, misses_ = 0, bytesOut_ = 0;  // for the log at retirement
};

void StoreServer::run() {
  std::vector<pollfd> fds;
  while (!finished()) {
    fds.clear();
    fds.push_back({listener_.get(), POLLIN, 0});
    for (auto& c : clients_) {
      fds.push_back({c->fd.get(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    }
    int n = ::poll(fds.data(), fds.size(), pollTimeoutMs());
    if (n < 0 && errno != EINTR) {
      XCCL_WARN(BOOT, "store server: poll failed: ", errnoString(errno), "; stopping");
      return;
    }
    std::vector<bool> keep(clients_.size(), true);
    for (size_t i = 0; i < clients_.size(); ++i) {
      Client& c = *clients_[i];
      short ev = fds[i + 1].revents;
      if (ev & (POLLIN | POLLHUP | POLLERR)) keep[i] = readClient(c);
      if (keep[i] && !c.out.empty()) keep[i] = flushClient(c);
      if (keep[i] && !c.authed &&
          Clock::now() - c.since > std::chrono::milliseconds(kHelloTimeoutMs)) {
        XCCL_WARN(BOOT, "store server: dropped client ", c.addr, ": no hello within ",
                  kHelloTimeoutMs, " ms");
        keep[i] = false;
      }
    }
    expireParked();
    for (size_t i = clients_.size(); i-- > 0;) {
      if (!keep[i] || clients_[i]->closing) clients_.erase(clients_.begin() + static_cast<long>(i));
    }
    if (fds[0].revents & POLLIN) acceptAll();
  }
  XCCL_INFO(BOOT, "store server: all ", nranks_, " ranks done, stopping; it answered ", requests_,
            " requests (", misses_, " for keys not there yet) and sent ", bytesOut_, " bytes");
}

bool StoreServer::finished() const {
  return !forever_ && nranks_ > 0 && static_cast<long>(doneKeys_.size()) >= nranks_ &&
         clients_.empty();
}

void StoreServer::acceptAll() {
  for (;;) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a transient error: try again on the next poll
    auto c = std::make_unique<Client>();
    c->fd.reset(fd);
    c->addr = net::peerAddrOf(fd);
    clients_.push_back(std::move(c));
  }
}

bool StoreServer::readClient(Client& c) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      if (!drain(c)) return false;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    if (!c.in.empty()) {
      XCCL_WARN(BOOT, "store server: client ", c.addr, " closed mid-request (", c.in.size(),
                " bytes pending)");
    }
    return false;  // EOF or error
  }
}

bool StoreServer::drain(Client& c) {
  std::string why;
  Parse p;
  while ((p = handleOne(c, &why)) == Parse::kDone) {
  }
  if (c.parked && c.in.size() > kMaxValue + 2 * kMaxKey) {  // it does not wait its turn
    p = Parse::kBad;
    why = strCat(c.in.size(), " bytes sent behind a request still waiting for its answer");
  }
  if (p == Parse::kBad) {
    XCCL_WARN(BOOT, "refused store client ", c.addr, ": ", why);
    if (!c.out.empty()) flushClient(c);  // best effort: tell it why
    return false;
  }
  return true;
}

void StoreServer::answer(Client& c, const std::string& key, bool take) {
  auto it = kv_.find(key);
  if (it == kv_.end()) {
    c.out.push_back(1);
    ++misses_;
    return;
  }
  c.out.push_back(0);
  net::putU32(c.out, static_cast<uint32_t>(it->second.size()));
  c.out += it->second;
  bytesOut_ += it->second.size();
  if (take) kv_.erase(it);
}

void StoreServer::wake(const std::string& key) {
  for (auto& cp : clients_) {
    Client& c = *cp;
    if (!c.parked || c.parkedKey != key || c.closing) continue;
    c.parked = false;
    answer(c, key, c.parkedTake);
    if (!flushClient(c) || !drain(c)) c.closing = true;
    if (kv_.count(key) == 0) return;  // taken
  }
}

void StoreServer::expireParked() {
  const auto now = Clock::now();
  for (auto& cp : clients_) {
    Client& c = *cp;
    if (!c.parked || c.closing || now < c.until) continue;
    c.parked = false;
    answer(c, c.parkedKey, false);  // absent: a set would have woken it
    if (!flushClient(c) || !drain(c)) c.closing = true;
  }
}

int StoreServer::pollTimeoutMs() const {
  int64_t ms = 200;  // the hello timeout and retirement are looked at this often
  const auto now = Clock::now();
  for (const auto& c : clients_) {
    if (!c->parked) continue;
    const int64_t left =
        std::chrono::duration_cast<std::chrono::milliseconds>(c->until - now).count() + 1;
    ms = std::min<int64_t>(ms, std::max<int64_t>(left, 0));
  }
  return static_cast<int>(ms);
}

bool StoreServer::flushClient(Client& c) {
  while (!c.out.empty()) {
    ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    return false;
  }
  return true;
}

Parse StoreServer::handleHello(Client& c, std::string* why) {
  if (c.nonce.empty()) {  // the hello: answer with our nonce and proof
    if (c.in.size() < kHelloBytes) return Parse::kNeedMore;
    const auto* p = reinterpret_cast<const unsigned char*>(c.in.data());
    if (std::memcmp(p, kHelloMagic, 4) != 0 || net::getU32(p + 4) != kVersion) {
      *why = "bad hello (not an xccl store client, or another version)";
      return Parse::kBad;
    }
    c.theirNonce = c.in.substr(8, auth::kNonceBytes);
    c.in.erase(0, kHelloBytes);
    c.nonce = auth::nonce();
    c.out += c.nonce + auth::proof(secret_, "store-server", c.theirNonce, c.nonce, "xccl-store");
    return Parse::kDone;
  }
  if (c.in.size() < auth::kProofBytes) return Parse::kNeedMore;
  if (!auth::sameProof(c.in.substr(0, auth::kProofBytes),
                       auth::proof(secret_, "store-client", c.nonce, c.theirNonce, "xccl-store"))) {
    c.out.push_back(1);
    *why = "bad proof (another job's unique id, or a replay)";
    return Parse::kBad;
  }
  c.in.erase(0, auth::kProofBytes);
  c.authed = true;
  c.out.push_back(0);
  return Parse::kDone;
}

// Parses and answers one complete request at the front of c.in.
Parse StoreServer::handleOne(Client& c, std::string* why) {
  if (!c.authed) return handleHello(c, why);
  if (c.parked) return Parse::kNeedMore;  // one request at a time
  StoreRequest req;
  size_t used = 0;
  StoreParse r = parseStoreRequest(c.in, &req, &used, why);
  if (r != StoreParse::kDone) return r == StoreParse::kNeedMore ? Parse::kNeedMore : Parse::kBad;
  c.in.erase(0, used);
  ++requests_;
  if (req.op == 'G' || req.op == 'T') {
    if (kv_.count(req.key) == 0 && req.waitMs > 0) {
      c.parked = true;
      c.parkedTake = req.op == 'T';
      c.parkedKey = req.key;
      c.until = Clock::now() + std::chrono::milliseconds(std::min(req.waitMs, kMaxWaitMs));
      return Parse::kDone;
    }
    answer(c, req.key, req.op == 'T');
    return Parse::kDone;
  }
  if (req.key.compare(0, std::strlen(kDoneKeyPrefix), kDoneKeyPrefix) == 0) {
    long n = std::strtol(req.value.c_str(), nullptr, 10);
    if (n > 0) nranks_ = n;
    doneKeys_.insert(req.key);
  }
  kv_[req.key] = std::move(req.value);
  c.out.push_back(0);
  wake(req.key);
  return Parse::kDone;
}

}  // namespace

void startStoreServer(net::Fd listener, const std::string& secret, bool forever) {
  auto* server = new StoreServer(std::move(listener), secret, forever);
  // Detached: the thread owns `server` and frees it when it retires. If the process exits
  // first, the thread dies in poll() without touching anything global.
  std::thread([server] {
    server->run();
    delete server;
  }).detach();
}

StoreParse parseStoreRequest(const std::string& in, StoreRequest* req, size_t* used,
                             std::string* why) {
  if (in.size() < 5) return StoreParse::kNeedMore;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const char op = static_cast<char>(p[0]);
  const uint32_t klen = net::getU32(p + 1);
  if ((op != 'S' && op != 'G' && op != 'T') || klen == 0 || klen > kMaxKey) {
    *why = strCat("malformed request (op ", static_cast<int>(op), ", key length ", klen, ")");
    return StoreParse::kBad;
  }
  const size_t need = 5 + klen;
  if (in.size() < need) return StoreParse::kNeedMore;
  req->op = op;
  req->key = in.substr(5, klen);
  if (op != 'S') {
    if (in.size() < need + 4) return StoreParse::kNeedMore;
    req->waitMs = net::getU32(p + need);
    *used = need + 4;
    return StoreParse::kDone;
  }
  if (in.size() < need + 4) return StoreParse::kNeedMore;
  const uint32_t vlen = net::getU32(p + need);
  if (vlen > kMaxValue) {
    *why = strCat("value of ", vlen, " bytes exceeds the limit of ", kMaxValue);
    return StoreParse::kBad;
  }
  if (in.size() < need + 4 + vlen) return StoreParse::kNeedMore;
  req->value = in.substr(need + 4, vlen);
  *used = need + 4 + vlen;
  return StoreParse::kDone;
}

}  // namespace xccl
