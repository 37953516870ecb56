// The process's bootstrap service (bootstrap.h, processService): the unique-id store server,
// one per process for its whole life, which communicators made from communicators meet on
// (core/derive.h), and the probe that asks whether a peer's process still answers.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "bootstrap_internal.h"
#include "common/error.h"
#include "common/log.h"

namespace xccl {
namespace {

constexpr size_t kServiceSecretBytes = 32;

// Splits a service description "ip:port hexsecret".
void parseService(const std::string& service, net::SockAddr* addr, std::string* secret) {
  const size_t sp = service.find(' ');
  *secret = sp == std::string::npos ? std::string() : fromHex(service.substr(sp + 1));
  if (secret->size() != kServiceSecretBytes) {
    throw RemoteError(
        strCat("malformed bootstrap service description '", service.substr(0, 64), "'"));
  }
  *addr = net::parseAddr(service.substr(0, sp));
}

}  // namespace

std::string processService() {
  static std::mutex mu;
  static std::string service;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> g(mu);
  // A forked child inherits the description but not the thread: it starts its own.
  if (!service.empty() && owner == ::getpid()) return service;
  net::Fd listener = net::listenOn(net::localAddress());
  const net::SockAddr addr = net::boundAddr(listener.get());
  const std::string secret = fromHex(randomSecret());
  startStoreServer(std::move(listener), secret, /*forever=*/true);
  service = strCat(net::formatAddr(addr), " ", toHex(secret));
  owner = ::getpid();
  XCCL_INFO(BOOT, "bootstrap service of process ", owner, " listening on ", net::formatAddr(addr));
  return service;
}

namespace {
constexpr char kGrowMagic[4] = {'X', 'C', 'G', 'R'};
constexpr uint32_t kGrowVersion = 1;
constexpr size_t kGrowSecretBytes = 32;
// Layout: magic [0, 4), version [4, 8), address (net::putIdAddr) [8, 16), the service's
// secret, the grow secret, the old size (u32), an IPv6 address.
constexpr size_t kGrowV6At = 16 + kServiceSecretBytes + kGrowSecretBytes + 4;
}  // namespace

void makeGrowId(int oldRanks, xcclUniqueId* id) {
  net::SockAddr addr;
  std::string serviceSecret;
  parseService(processService(), &addr, &serviceSecret);
  const std::string secret = fromHex(randomSecret());
  std::string out(kGrowMagic, 4);
  net::putU32(out, kGrowVersion);
  out.append(8, '\0');  // the address (below)
  out += serviceSecret;
  out += secret;
  net::putU32(out, static_cast<uint32_t>(oldRanks));
  static_assert(kGrowV6At + 16 <= sizeof(id->internal), "grow id fits a unique id");
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, out.data(), out.size());
  auto* p = reinterpret_cast<unsigned char*>(id->internal);
  net::putIdAddr(addr, p + 8, p + kGrowV6At);
}

bool parseGrowId(const xcclUniqueId& id, GrowId* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(id.internal);
  if (std::memcmp(p, kGrowMagic, 4) != 0) return false;
  const uint32_t version = net::getU32(p + 4);
  XCCL_CHECK_ARG(version == kGrowVersion, "grow id of version ", version, " (this library reads ",
                 kGrowVersion, ")");
  const net::SockAddr addr = net::getIdAddr(p + 8, p + kGrowV6At);
  const std::string serviceSecret(id.internal + 16, kServiceSecretBytes);
  out->service = strCat(net::formatAddr(addr), " ", toHex(serviceSecret));
  out->secret = toHex(std::string(id.internal + 16 + kServiceSecretBytes, kGrowSecretBytes));
  out->oldRanks = static_cast<int>(net::getU32(p + 16 + kServiceSecretBytes + kGrowSecretBytes));
  XCCL_CHECK_ARG(out->oldRanks > 0 && addr.port() != 0, "damaged grow id (old size ", out->oldRanks,
                 ", port ", addr.port(), ")");
  return true;
}

std::unique_ptr<Store> connectService(const std::string& service, const Deadline& deadline,
                                      int64_t roundTripMs) {
  net::SockAddr addr;
  std::string secret;
  parseService(service, &addr, &secret);
  // A service is published only once it listens, and lives as long as its process: a
  // refusal means the process is gone, not that it is still starting (no retries).
  return connectStoreAt(addr, secret, "bootstrap service", deadline, /*knownUp=*/true, roundTripMs);
}

ServiceState probeServiceState(const std::string& service, const Deadline& deadline) {
  net::SockAddr addr;
  std::string secret;
  parseService(service, &addr, &secret);
  net::WaitCtx ctx{deadline, nullptr, strCat("probe of bootstrap service ", net::formatAddr(addr))};
  try {
    // One connect attempt: the service was up before its address was published, so a
    // refusal means its process is gone (connectTo would retry until the deadline).
    net::Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return ServiceState::kSilent;  // out of descriptors here: no verdict
    int rc = ::connect(fd.get(), addr.sa(), addr.len());
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      net::waitFd(fd.get(), POLLOUT, ctx);
      socklen_t len = sizeof(err);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == ECONNREFUSED || err == ECONNRESET) return ServiceState::kGone;
    if (err != 0) return ServiceState::kSilent;  // unreachable, no route: says nothing of it
    authenticateClient(fd.get(), secret, ctx);   // a stopped process never answers
    return ServiceState::kAnswers;
  } catch (const Timeout&) {
    return ServiceState::kSilent;
  } catch (const Error&) {
    return ServiceState::kGone;  // reset or closed while answering, or refused our proof
  }
}

bool probeService(const std::string& service, const Deadline& deadline) {
  return probeServiceState(service, deadline) == ServiceState::kAnswers;
}

void MemberWatch::check(int self, int rank, const std::string& waitingFor) const {
  if (rank < 0 || rank >= static_cast<int>(services.size()) || services[rank].empty()) return;
  // Short: a gone process refuses at once; a silent one is no verdict yet and must not hold
  // up the wait it is checked from.
  constexpr int64_t kProbeMs = 100;
  if (silentSince_.size() != services.size()) silentSince_.assign(services.size(), {});
  const auto asked = Clock::now();
  const ServiceState state = probeServiceState(services[rank], Deadline::after(kProbeMs));
  const bool named = rank < static_cast<int>(who.size()) && !who[rank].empty();
  const std::string member = named ? who[rank] : strCat("rank ", rank);
  if (state == ServiceState::kAnswers) {
    silentSince_[rank] = {};
    return;
  }
  if (state == ServiceState::kSilent) {
    if (silentLimitMs <= 0) return;
    if (silentSince_[rank] == Clock::time_point{}) silentSince_[rank] = asked;
    const int64_t silentMs =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - silentSince_[rank])
            .count();
    if (silentMs < silentLimitMs) return;
    throw RemoteError(strCat("rank ", self, ": ", member, " has not answered for ", silentMs,
                             " ms (stopped or cut off; XCCL_HEARTBEAT_TIMEOUT_MS=", silentLimitMs,
                             ") while this rank waits for ", waitingFor,
                             consequence.empty() ? "" : "; " + consequence));
  }
  throw RemoteError(strCat("rank ", self, ": ", member,
                           " is gone (its process no longer answers) while this rank waits for ",
                           waitingFor, consequence.empty() ? "" : "; " + consequence));
}

}  // namespace xccl
