// The process's bootstrap service (bootstrap.h, processService): the unique-id store server,
// one per process for its whole life, which communicators made from communicators meet on
// (core/derive.h), and the probe that asks whether a peer's process still answers.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>

#include "bootstrap_internal.h"
#include "common/error.h"
#include "common/log.h"

namespace xccl {
namespace {

constexpr size_t kServiceSecretBytes = 32;

// Splits a service description "ip:port hexsecret".
void parseService(const std::string& service, sockaddr_in* addr, std::string* secret) {
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
  const sockaddr_in addr = net::boundAddr(listener.get());
  const std::string secret = fromHex(randomSecret());
  startStoreServer(std::move(listener), secret, /*forever=*/true);
  service = strCat(net::formatAddr(addr), " ", toHex(secret));
  owner = ::getpid();
  XCCL_INFO(BOOT, "bootstrap service of process ", owner, " listening on ", net::formatAddr(addr));
  return service;
}

std::unique_ptr<Store> connectService(const std::string& service, const Deadline& deadline) {
  sockaddr_in addr{};
  std::string secret;
  parseService(service, &addr, &secret);
  return connectStoreAt(addr, secret, "bootstrap service", deadline);
}

bool probeService(const std::string& service, const Deadline& deadline) {
  sockaddr_in addr{};
  std::string secret;
  parseService(service, &addr, &secret);
  net::WaitCtx ctx{deadline, nullptr, strCat("probe of bootstrap service ", net::formatAddr(addr))};
  try {
    // One connect attempt: the service was up before its address was published, so a
    // refusal means its process is gone (connectTo would retry until the deadline).
    net::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return false;
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      net::waitFd(fd.get(), POLLOUT, ctx);
      socklen_t len = sizeof(err);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) return false;
    authenticateClient(fd.get(), secret, ctx);  // a stopped process never answers
    return true;
  } catch (const Error&) {
    return false;  // reset, closed, refused our proof, or no answer before the deadline
  }
}

}  // namespace xccl
