#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "common/wait_notice.h"
#include "interfaces.h"

namespace xccl {
namespace net {

// Interfaces to take the address from, NCCL's syntax (interfaces.h); empty = auto.
XCCL_PARAM_STR(SocketIfname, "SOCKET_IFNAME", "")
// Address family of the interfaces a rank advertises: AF_INET (IPv4) or AF_INET6 (IPv6).
XCCL_PARAM_STR(SocketFamily, "SOCKET_FAMILY", "AF_INET")

namespace {
// Polls sleep at most this long, so that abort flags are noticed promptly.
constexpr int kPollSliceMs = 50;
}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

SockAddr parseAddr(const std::string& text) {
  size_t colon = text.rfind(':');
  XCCL_CHECK_ARG(colon != std::string::npos, "bad address '", text,
                 "': expected ip:port or [ipv6]:port");
  std::string host = text.substr(0, colon);
  std::string port = text.substr(colon + 1);
  SockAddr addr;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr.ss);
    a6->sin6_family = AF_INET6;
    XCCL_CHECK_ARG(
        inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6->sin6_addr) == 1,
        "bad address '", text, "': '", host, "' is not an IPv6 address");
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&addr.ss);
    a4->sin_family = AF_INET;
    XCCL_CHECK_ARG(inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1, "bad address '", text,
                   "': '", host, "' is not an IPv4 address (IPv6: [address]:port)");
  }
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  XCCL_CHECK_ARG(!port.empty() && *end == '\0' && p >= 0 && p <= 65535, "bad address '", text,
                 "': bad port");
  addr.setPort(static_cast<uint16_t>(p));
  return addr;
}

std::string formatAddr(const SockAddr& addr) {
  if (addr.family() == AF_INET6) return strCat("[", addr.host(), "]:", addr.port());
  return strCat(addr.host(), ":", addr.port());
}

void putIdAddr(const SockAddr& addr, unsigned char* base, unsigned char* v6At) {
  const uint16_t port = htons(addr.port());
  std::memcpy(base + 4, &port, 2);
  if (addr.family() == AF_INET6) {
    base[6] = 6;
    std::memcpy(v6At, &reinterpret_cast<const sockaddr_in6*>(&addr.ss)->sin6_addr, 16);
  } else {
    base[6] = 0;
    std::memcpy(base, &reinterpret_cast<const sockaddr_in*>(&addr.ss)->sin_addr, 4);
  }
}

SockAddr getIdAddr(const unsigned char* base, const unsigned char* v6At) {
  SockAddr addr;
  uint16_t port = 0;
  std::memcpy(&port, base + 4, 2);
  XCCL_CHECK_ARG(base[6] == 0 || base[6] == 6, "damaged id: address family mark ", int(base[6]));
  if (base[6] == 6) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr.ss);
    a6->sin6_family = AF_INET6;
    std::memcpy(&a6->sin6_addr, v6At, 16);
    a6->sin6_port = port;
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&addr.ss);
    a4->sin_family = AF_INET;
    std::memcpy(&a4->sin_addr, base, 4);
    a4->sin_port = port;
  }
  return addr;
}

std::string peerAddrOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) {
    return "?";
  }
  return formatAddr(SockAddr(reinterpret_cast<const sockaddr*>(&ss)));
}

bool chosenInterface(Interface* out, std::string* how, std::string* why) {
  std::vector<Interface> ifaces = listInterfaces(familyOf(xcclParamSocketFamily()));
  const Interface* pick = chooseInterface(ifaces, xcclParamSocketIfname(), how, why);
  if (pick == nullptr) {
    *why = strCat(*why, " (XCCL_SOCKET_FAMILY=", xcclParamSocketFamily(), ")");
    return false;
  }
  *out = *pick;
  return true;
}

SockAddr localAddress() {
  std::string how, why;
  Interface pick;
  if (!chosenInterface(&pick, &how, &why)) throw InvalidUsage(why);
  SockAddr found = pick.addr;
  found.setPort(0);
  static std::once_flag logged;
  std::call_once(logged, [&] {
    XCCL_INFO(NET, "interface ", pick.name, " ", formatAddr(found), " (", how, ")");
  });
  return found;
}

Fd listenOn(const SockAddr& addr) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  XCCL_SYSCHECK(fd.get(), "socket");
  int one = 1;
  // A fixed port (XCCL_COMM_ID) must be reusable right after a previous run.
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), addr.sa(), addr.len()) != 0) {
    throw IoError(strCat("bind to ", formatAddr(addr), " failed: ", errnoString(errno)));
  }
  XCCL_SYSCHECK(::listen(fd.get(), SOMAXCONN), "listen");
  return fd;
}

SockAddr boundAddr(int fd) {
  SockAddr addr;
  socklen_t len = sizeof(addr.ss);
  XCCL_SYSCHECK(getsockname(fd, addr.sa(), &len), "getsockname");
  return addr;
}

void setNonblockingNoDelay(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  XCCL_SYSCHECK(flags, "fcntl(F_GETFL)");
  XCCL_SYSCHECK(fcntl(fd, F_SETFL, flags | O_NONBLOCK), "fcntl(F_SETFL)");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

short waitFd(int fd, short events, const WaitCtx& ctx) {
  WaitNotice notice(ctx.what, NET);
  for (;;) {
    notice.tick();
    if (ctx.abortFlag && ctx.abortFlag->load(std::memory_order_relaxed)) {
      throw InvalidUsage(strCat(ctx.what, ": aborted"));
    }
    if (ctx.deadline.expired()) {
      throw Timeout(strCat(ctx.what, ": timed out after ", ctx.deadline.budgetMs(), " ms"));
    }
    int64_t left = ctx.deadline.remainingMs();
    int slice = left < 0 ? kPollSliceMs : static_cast<int>(std::min<int64_t>(left, kPollSliceMs));
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, slice);
    if (n < 0 && errno != EINTR) XCCL_SYSCHECK(n, strCat(ctx.what, ": poll"));
    if (n > 0) return p.revents;
  }
}

namespace {

// One nonblocking connect, waited for within ctx: 0 or the errno it ended with.
int connectAttempt(Fd& fd, const SockAddr& addr, const WaitCtx& ctx) {
  fd.reset(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  XCCL_SYSCHECK(fd.get(), "socket");
  int rc = ::connect(fd.get(), addr.sa(), addr.len());
  int err = rc == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    waitFd(fd.get(), POLLOUT, ctx);
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  }
  return err;
}

}  // namespace

Fd connectTo(const SockAddr& addr, const WaitCtx& ctx) {
  WaitNotice notice(strCat(ctx.what, " (connection refused: is the peer up?)"), NET);
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) notice.tick();
    Fd fd;
    const int err = connectAttempt(fd, addr, ctx);
    if (err == 0) {
      setNonblockingNoDelay(fd.get());
      return fd;
    }
    // The listener may not be up yet (store server racing its clients); anything
    // else is a real failure.
    if (err != ECONNREFUSED && err != ECONNRESET && err != ETIMEDOUT && err != EAGAIN) {
      throw IoError(strCat(ctx.what, ": connect failed: ", errnoString(err)));
    }
    fd.reset();
    if (ctx.deadline.expired()) {
      throw Timeout(strCat(ctx.what, ": connect failed (", errnoString(err), ") until deadline of ",
                           ctx.deadline.budgetMs(), " ms"));
    }
    if (ctx.abortFlag && ctx.abortFlag->load()) throw InvalidUsage(strCat(ctx.what, ": aborted"));
    ::usleep(std::min(attempt + 1, 20) * 5000);
  }
}

Fd connectOnce(const SockAddr& addr, const WaitCtx& ctx) {
  Fd fd;
  const int err = connectAttempt(fd, addr, ctx);
  if (err == ECONNREFUSED || err == ECONNRESET) {
    throw RemoteError(
        strCat(ctx.what, ": connection refused: its communicator is closed or its process gone"));
  }
  if (err != 0) throw IoError(strCat(ctx.what, ": connect failed: ", errnoString(err)));
  setNonblockingNoDelay(fd.get());
  return fd;
}

void sendAll(int fd, const void* buf, size_t len, const WaitCtx& ctx) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      waitFd(fd, POLLOUT, ctx);
      continue;
    }
    throw RemoteError(strCat(ctx.what, ": send failed: ", errnoString(errno)));
  }
}

void recvAll(int fd, void* buf, size_t len, const WaitCtx& ctx) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw RemoteError(strCat(ctx.what, ": connection closed by peer"));
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      waitFd(fd, POLLIN, ctx);
      continue;
    }
    throw RemoteError(strCat(ctx.what, ": recv failed: ", errnoString(errno)));
  }
}

bool constantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

void putU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void putU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t getU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t getU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace net
}  // namespace xccl
