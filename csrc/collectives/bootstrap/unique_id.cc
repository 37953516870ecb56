// The unique-id rendezvous: a tiny authenticated key-value server over TCP (its server side
// is store_server.cc), started by createUniqueId() in the calling process, and the Store
// client every rank uses.
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

using namespace storewire;  // NOLINT: the wire's constants, shared with store_server.cc

constexpr char kIdMagic[4] = {'X', 'C', 'I', 'D'};
constexpr size_t kSecretBytes = 32;
// Layout: magic [0, 4), version [4, 8), address (IPv4 and port, net::putIdAddr) [8, 15),
// secret [16, 48), an IPv6 address [48, 64).
constexpr size_t kIdV6At = 16 + kSecretBytes;
static_assert(kIdV6At + 16 <= sizeof(xcclUniqueId::internal), "an IPv6 address fits the id");
constexpr int64_t kRoundTripMs = 60000;  // one request/response with a live server

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

net::SockAddr idAddr(const xcclUniqueId& id) {
  XCCL_CHECK_ARG(
      std::memcmp(id.internal, kIdMagic, 4) == 0 &&
          net::getU32(reinterpret_cast<const unsigned char*>(id.internal) + 4) == kVersion,
      "not an xccl unique id (bad magic or version): was it made by xcclGetUniqueId?");
  const auto* p = reinterpret_cast<const unsigned char*>(id.internal);
  return net::getIdAddr(p + 8, p + kIdV6At);
}

}  // namespace

void createUniqueId(xcclUniqueId* id) {
  XCCL_CHECK_ARG(id != nullptr, "uniqueId is NULL");
  std::string commId = xcclParamCommId();
  net::SockAddr addr = commId.empty() ? net::localAddress() : net::parseAddr(commId);
  net::Fd listener = net::listenOn(addr);
  addr = net::boundAddr(listener.get());
  std::string secret = fromHex(randomSecret());

  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, kIdMagic, 4);
  std::string ver;
  net::putU32(ver, kVersion);
  std::memcpy(id->internal + 4, ver.data(), 4);
  auto* p = reinterpret_cast<unsigned char*>(id->internal);
  net::putIdAddr(addr, p + 8, p + kIdV6At);
  std::memcpy(id->internal + 16, secret.data(), kSecretBytes);

  startStoreServer(std::move(listener), secret, /*forever=*/false);
  XCCL_INFO(BOOT, "unique-id store listening on ", net::formatAddr(addr));
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
std::unique_ptr<Store> connectStoreAt(const net::SockAddr& addr, const std::string& secret,
                                      const std::string& what, const Deadline& deadline,
                                      bool knownUp, int64_t roundTripMs,
                                      const std::atomic<bool>* abortFlag) {
  const std::string where = net::formatAddr(addr);
  net::WaitCtx ctx{deadline, abortFlag, strCat(what, " ", where)};
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

std::unique_ptr<Store> connectUniqueIdStore(const xcclUniqueId& id, const Deadline& deadline,
                                            const std::atomic<bool>* abortFlag) {
  return connectStoreAt(idAddr(id), std::string(id.internal + 16, kSecretBytes), "unique-id store",
                        deadline, /*knownUp=*/false, /*roundTripMs=*/0, abortFlag);
}

}  // namespace xccl
