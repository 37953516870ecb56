// The unique-id rendezvous: a tiny authenticated key-value server over TCP, started by
// createUniqueId() in the calling process, and the Store client every rank uses.
//
// Unique id (128 bytes): "XCID" | u32 version | IPv4 addr (4, network order) |
// port (2, network order) | 2 zero | 32-byte raw secret | zeros.
//
// Wire protocol (all integers u32 little-endian):
//   client hello : "XCSB" | version | client nonce (16)   -> server: its nonce (16) and its
//                                                            proof (32) over the client's
//   client proof : 32 bytes over the server's nonce       -> server: 1 byte, 0 = accepted
// (mutual challenge-response, common/auth.h: the id's secret never travels, and the client
// checks the server's proof before giving its own)
//   set          : 'S' | keylen | key | vallen | value    -> 1 byte 0
//   get          : 'G' | keylen | key | waitms            -> 0 | vallen | value, or 1 (absent)
//   take         : 'T' | keylen | key | waitms            -> as get, and the key is removed
// A get or take of an absent key is parked for up to waitms (at most 60 s): the server
// answers it when a set brings the key (one take per set; gets all see it), or "absent" when
// the time is up, so a waiting rank costs nothing until then (no polling). The server never
// blocks on a client: a parked request is a mark on that client, and a slow or dead client
// cannot stall the others. Lengths are bounded before anything is buffered; anything
// malformed closes that client (and is logged).
//
// Lifetime: the server thread is detached and owns its state. It exits once every rank
// has written its "peer/done/<rank>" mark (value = nranks) and every client connection has
// closed; until then it sleeps in poll() and is harmless at process exit.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "bootstrap_internal.h"
#include "collectives/transport/tcp/socket.h"
#include "common/auth.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"

namespace xccl {

// "ip:port" for the unique-id server to listen on (fixed port, e.g. for a launcher);
// empty = the host's primary address (XCCL_SOCKET_IFNAME) and an ephemeral port.
XCCL_PARAM_STR(CommId, "COMM_ID", "")

namespace {

constexpr char kIdMagic[4] = {'X', 'C', 'I', 'D'};
constexpr char kHelloMagic[4] = {'X', 'C', 'S', 'B'};
constexpr uint32_t kVersion = 2;
constexpr size_t kSecretBytes = 32;
constexpr size_t kHelloBytes = 8 + auth::kNonceBytes;
constexpr uint32_t kMaxKey = 1024;
constexpr uint32_t kMaxValue = 64u << 20;
constexpr int kHelloTimeoutMs = 10000;   // a client that never says hello is dropped
constexpr int64_t kRoundTripMs = 60000;  // one request/response with a live server
constexpr uint32_t kMaxWaitMs = 60000;   // the longest a get or take is parked

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

// The client side: one authenticated connection, one request at a time.
class UniqueIdStore : public Store {
 public:
  UniqueIdStore(net::Fd fd, std::string addr, int64_t roundTripMs)
      : fd_(std::move(fd)), addr_(std::move(addr)), roundTripMs_(roundTripMs) {}

  void set(const std::string& key, const std::string& value) override {
    XCCL_CHECK_ARG(!key.empty() && key.size() <= kMaxKey, "store key length ", key.size());
    XCCL_CHECK_ARG(value.size() <= kMaxValue, "store value of ", value.size(), " bytes");
    std::string req = "S";
    net::putU32(req, static_cast<uint32_t>(key.size()));
    req += key;
    net::putU32(req, static_cast<uint32_t>(value.size()));
    req += value;
    std::lock_guard<std::mutex> lock(mu_);
    Deadline io = Deadline::after(roundTripMs_);
    net::WaitCtx ctx{io, nullptr, strCat("store ", addr_, ": set '", key, "'")};
    guarded([&] {
      net::sendAll(fd_.get(), req.data(), req.size(), ctx);
      char status = 1;
      net::recvAll(fd_.get(), &status, 1, ctx);
      if (status != 0) throw RemoteError(strCat(ctx.what, ": server answered ", int(status)));
    });
  }

  std::string get(const std::string& key, const Deadline& deadline) override {
    return fetch('G', key, deadline);
  }

  std::string take(const std::string& key, const Deadline& deadline) override {
    return fetch('T', key, deadline);
  }

 private:
  // A get ('G') or take ('T'), parked at the server for up to a second at a time until the
  // key exists or the deadline.
  std::string fetch(char op, const std::string& key, const Deadline& deadline) {
    XCCL_CHECK_ARG(!key.empty() && key.size() <= kMaxKey, "store key length ", key.size());
    for (;;) {
      const int64_t left = deadline.remainingMs();
      const uint32_t waitMs =
          static_cast<uint32_t>(left < 0 ? 1000 : std::min<int64_t>(left, 1000));
      std::string req(1, op);
      net::putU32(req, static_cast<uint32_t>(key.size()));
      req += key;
      net::putU32(req, waitMs);
      std::string value;
      if (tryGet(key, req, waitMs, &value)) return value;
      if (deadline.expired()) {
        throw Timeout(strCat("store ", addr_, ": get '", key, "' timed out after ",
                             deadline.budgetMs(), " ms"));
      }
    }
  }

  bool tryGet(const std::string& key, const std::string& req, uint32_t waitMs, std::string* value) {
    std::lock_guard<std::mutex> lock(mu_);
    Deadline io = Deadline::after(roundTripMs_ + waitMs);
    net::WaitCtx ctx{io, nullptr, strCat("store ", addr_, ": get '", key, "'")};
    bool found = false;
    guarded([&] {
      net::sendAll(fd_.get(), req.data(), req.size(), ctx);
      unsigned char status = 1;
      net::recvAll(fd_.get(), &status, 1, ctx);
      if (status != 0) return;
      unsigned char len[4];
      net::recvAll(fd_.get(), len, 4, ctx);
      uint32_t n = net::getU32(len);
      if (n > kMaxValue) throw RemoteError(strCat(ctx.what, ": bad value length ", n));
      value->assign(n, '\0');
      net::recvAll(fd_.get(), value->data(), n, ctx);
      found = true;
    });
    return found;
  }

  // A failed round trip leaves the stream out of sync: refuse further use.
  // A request the server did not answer in roundTripMs_ is the server's failure (stopped or
  // cut off), not a wait that ran out: RemoteError, so that no caller asks again.
  template <typename F>
  void guarded(F&& f) {
    if (broken_) throw RemoteError(strCat("store ", addr_, ": connection failed earlier"));
    try {
      f();
    } catch (const Timeout& e) {
      broken_ = true;
      throw RemoteError(strCat(e.what(), " (the server's process stopped or cut off?)"));
    } catch (...) {
      broken_ = true;
      throw;
    }
  }

  std::mutex mu_;
  net::Fd fd_;
  std::string addr_;
  int64_t roundTripMs_;  // how long one request may wait for its answer
  bool broken_ = false;
};

sockaddr_in idAddr(const xcclUniqueId& id) {
  XCCL_CHECK_ARG(
      std::memcmp(id.internal, kIdMagic, 4) == 0 &&
          net::getU32(reinterpret_cast<const unsigned char*>(id.internal) + 4) == kVersion,
      "not an xccl unique id (bad magic or version): was it made by xcclGetUniqueId?");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  std::memcpy(&addr.sin_addr.s_addr, id.internal + 8, 4);
  std::memcpy(&addr.sin_port, id.internal + 12, 2);
  return addr;
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

void createUniqueId(xcclUniqueId* id) {
  XCCL_CHECK_ARG(id != nullptr, "uniqueId is NULL");
  std::string commId = xcclParamCommId();
  sockaddr_in addr = commId.empty() ? net::localAddress() : net::parseAddr(commId);
  net::Fd listener = net::listenOn(addr);
  addr = net::boundAddr(listener.get());
  std::string secret = fromHex(randomSecret());

  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, kIdMagic, 4);
  std::string ver;
  net::putU32(ver, kVersion);
  std::memcpy(id->internal + 4, ver.data(), 4);
  std::memcpy(id->internal + 8, &addr.sin_addr.s_addr, 4);
  std::memcpy(id->internal + 12, &addr.sin_port, 2);
  std::memcpy(id->internal + 16, secret.data(), kSecretBytes);

  startStoreServer(std::move(listener), secret, /*forever=*/false);
  XCCL_INFO(BOOT, "unique-id store listening on ", net::formatAddr(addr));
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

std::string uniqueIdSecret(const xcclUniqueId& id) {
  idAddr(id);  // validates the magic
  return toHex(std::string(id.internal + 16, kSecretBytes));
}

// The client's half of the mutual challenge-response on a connected socket.
void authenticateClient(int fd, const std::string& secret, const net::WaitCtx& ctx) {
  const std::string mine = auth::nonce();
  std::string hello(kHelloMagic, 4);
  net::putU32(hello, kVersion);
  hello += mine;
  net::sendAll(fd, hello.data(), hello.size(), ctx);
  std::string answer(auth::kNonceBytes + auth::kProofBytes, '\0');
  net::recvAll(fd, &answer[0], answer.size(), ctx);
  const std::string theirs = answer.substr(0, auth::kNonceBytes);
  if (!auth::sameProof(answer.substr(auth::kNonceBytes),
                       auth::proof(secret, "store-server", mine, theirs, "xccl-store"))) {
    throw RemoteError(
        strCat(ctx.what, " does not know this secret (another job's store on that address?)"));
  }
  const std::string proof = auth::proof(secret, "store-client", theirs, mine, "xccl-store");
  net::sendAll(fd, proof.data(), proof.size(), ctx);
  char status = 1;
  net::recvAll(fd, &status, 1, ctx);
  if (status != 0) throw RemoteError(strCat(ctx.what, " refused us: bad proof"));
}

// One authenticated client connection to a store server at `addr` holding `secret` (raw).
std::unique_ptr<Store> connectStoreAt(const sockaddr_in& addr, const std::string& secret,
                                      const std::string& what, const Deadline& deadline,
                                      bool knownUp, int64_t roundTripMs) {
  const std::string where = net::formatAddr(addr);
  net::WaitCtx ctx{deadline, nullptr, strCat(what, " ", where)};
  net::Fd fd = knownUp ? net::connectOnce(addr, ctx) : net::connectTo(addr, ctx);
  // Connected, the server answers the challenge at once unless its process is stopped or
  // cut off (the kernel accepts for it meanwhile): a request's bound, not the whole wait's.
  const int64_t trip = roundTripMs > 0 ? roundTripMs : kRoundTripMs;
  const int64_t left = deadline.remainingMs();
  const Deadline auth = Deadline::after(left >= 0 && left < trip ? left : trip);
  net::WaitCtx authCtx{auth, nullptr, ctx.what};
  authenticateClient(fd.get(), secret, authCtx);
  XCCL_TRACE(BOOT, "connected to ", what, " ", where);
  return std::make_unique<UniqueIdStore>(std::move(fd), where, trip);
}

std::unique_ptr<Store> connectUniqueIdStore(const xcclUniqueId& id, const Deadline& deadline) {
  return connectStoreAt(idAddr(id), std::string(id.internal + 16, kSecretBytes), "unique-id store",
                        deadline);
}

}  // namespace xccl
