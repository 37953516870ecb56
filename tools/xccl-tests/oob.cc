// TCP star out-of-band channel (see oob.h). Wire format, all integers big-endian:
//   hello:   "XCTS" u32 rank, u32 world
//   round:   client -> server: u64 len, bytes
//            server -> client: world x (u64 len, bytes), in rank order; a dropped rank's
//            length is kGone and no bytes follow
#include "oob.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace xt {
namespace {

bool writeAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool readAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

uint64_t toBe64(uint64_t v) {
  uint64_t out = 0;
  unsigned char* b = reinterpret_cast<unsigned char*>(&out);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (56 - 8 * i));
  return out;
}
uint64_t fromBe64(uint64_t v) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&v);
  uint64_t out = 0;
  for (int i = 0; i < 8; ++i) out = (out << 8) | b[i];
  return out;
}

bool writeMsg(int fd, const std::string& s) {
  uint64_t len = toBe64(s.size());
  return writeAll(fd, &len, 8) && writeAll(fd, s.data(), s.size());
}

constexpr uint64_t kGoodbye = ~0ULL;   // length value of the "leaving cleanly" frame
constexpr uint64_t kGone = ~0ULL - 1;  // length value of a dropped rank's slot

bool writeGone(int fd) {
  uint64_t len = toBe64(kGone);
  return writeAll(fd, &len, 8);
}

// 0 = message, 2 = goodbye, 3 = a dropped rank's slot, 1 = EOF before the length, -1 = error.
int readMsg(int fd, std::string* s) {
  uint64_t len;
  char first;
  ssize_t r;
  do {
    r = ::recv(fd, &first, 1, 0);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return 1;
  if (r < 0) return -1;
  std::memcpy(&len, &first, 1);
  if (!readAll(fd, reinterpret_cast<char*>(&len) + 1, 7)) return -1;
  uint64_t n = fromBe64(len);
  if (n == kGoodbye) return 2;
  if (n == kGone) return 3;
  if (n > (64u << 20)) return -1;  // out-of-band messages are small
  s->assign(n, '\0');
  return readAll(fd, s->data(), n) ? 0 : -1;
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

// IPv4 or IPv6 (issue 28): an IPv6 literal binds IPv6, an IPv4 literal IPv4, and no address
// binds both where the kernel has IPv6 (one socket, IPV6_V6ONLY off: v4 peers arrive as
// v4-mapped addresses), else IPv4 alone.
int oobListen(const std::string& bindAddr, int port, int* boundPort, std::string* err) {
  const bool v6literal = bindAddr.find(':') != std::string::npos;
  const bool tryV6 = bindAddr.empty() || v6literal;
  int fd = tryV6 ? ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
  const bool v6 = fd >= 0;
  if (!v6) {
    if (v6literal) {
      *err = std::string("socket(AF_INET6) for ") + bindAddr + ": " + std::strerror(errno);
      return -1;
    }
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  }
  if (fd < 0) {
    *err = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len = 0;
  bool ok = true;
  if (v6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    a->sin6_addr = in6addr_any;
    std::string lit = bindAddr;
    if (lit.size() > 2 && lit.front() == '[' && lit.back() == ']')
      lit = lit.substr(1, lit.size() - 2);
    ok = lit.empty() || inet_pton(AF_INET6, lit.c_str(), &a->sin6_addr) == 1;
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    ok = bindAddr.empty() || inet_pton(AF_INET, bindAddr.c_str(), &a->sin_addr) == 1;
    len = sizeof(sockaddr_in);
  }
  if (!ok) {
    *err = "bad bind address " + bindAddr;
    ::close(fd);
    return -1;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 1024) != 0) {
    *err = "bind/listen on port " + std::to_string(port) + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *boundPort = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                        : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

OobServer::OobServer(int listenFd, int world, int acceptTimeoutSec, bool tolerateLoss)
    : listenFd_(listenFd),
      world_(world),
      acceptTimeoutSec_(acceptTimeoutSec),
      tolerateLoss_(tolerateLoss) {}

OobServer::~OobServer() { join(); }

void OobServer::start() {
  thread_ = std::thread([this] { run(); });
}

void OobServer::join() {
  if (thread_.joinable()) thread_.join();
  if (listenFd_ >= 0) ::close(listenFd_);
  listenFd_ = -1;
}

void OobServer::run() {
  std::vector<int> fds(world_, -1);
  auto closeAll = [&] {
    for (int& fd : fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(acceptTimeoutSec_);
  int connected = 0;
  while (connected < world_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd p{listenFd_, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
      if (left > 0 && errno == EINTR) continue;
      failed_ = true;  // not every rank arrived: release the ones that did
      closeAll();
      return;
    }
    int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    setNoDelay(fd);
    char hello[12];
    uint32_t rank, world;
    if (!readAll(fd, hello, 12) || std::memcmp(hello, "XCTS", 4) != 0) {
      ::close(fd);  // not one of ours
      continue;
    }
    std::memcpy(&rank, hello + 4, 4);
    std::memcpy(&world, hello + 8, 4);
    rank = ntohl(rank);
    world = ntohl(world);
    if (static_cast<int>(world) != world_ || rank >= world || fds[rank] >= 0) {
      ::close(fd);
      continue;
    }
    fds[rank] = fd;
    ++connected;
  }
  // Rounds: poll every rank that has not spoken yet, so that a rank dying while the
  // others are busy (say, blocked in a collective with it) is noticed at once.
  std::vector<std::string> msgs(world_);
  std::vector<bool> alive(world_, true);
  auto drop = [&](int r) {  // tolerateLoss: the others go on without r
    ::close(fds[r]);
    fds[r] = -1;
    alive[r] = false;
  };
  for (;;) {
    std::vector<int> state(world_, -1);  // -1 waiting, 0 message, 2 goodbye, 3 dropped
    int pending = 0;
    for (int r = 0; r < world_; ++r) {
      if (alive[r])
        ++pending;
      else
        state[r] = 3;
    }
    bool bad = false;
    while (pending > 0 && !bad) {
      std::vector<pollfd> pfds;
      std::vector<int> who;
      for (int r = 0; r < world_; ++r) {
        if (state[r] == -1) {
          pfds.push_back({fds[r], POLLIN, 0});
          who.push_back(r);
        }
      }
      if (::poll(pfds.data(), pfds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        bad = true;
        break;
      }
      for (size_t k = 0; k < pfds.size() && !bad; ++k) {
        if (pfds[k].revents == 0) continue;
        const int r = who[k];
        int rc = readMsg(pfds[k].fd, &msgs[r]);
        if (rc != 0 && rc != 2) {  // EOF without goodbye, or an error
          if (!tolerateLoss_) {
            bad = true;
            break;
          }
          drop(r);
          rc = 3;
        }
        state[r] = rc;
        --pending;
      }
    }
    int byes = 0, living = 0;
    for (int r = 0; r < world_; ++r) {
      byes += state[r] == 2;
      living += alive[r];
    }
    if (!bad && living > 0 && byes == living) break;  // everyone left finished: clean shutdown
    if (bad || byes > 0 || living == 0) {
      failed_ = true;  // a rank died or left early: release everyone else
      break;
    }
    for (int r = 0; r < world_; ++r) {
      if (!alive[r]) continue;
      bool ok = true;
      for (int s = 0; s < world_ && ok; ++s)
        ok = alive[s] ? writeMsg(fds[r], msgs[s]) : writeGone(fds[r]);
      if (ok) continue;
      if (!tolerateLoss_) {
        failed_ = true;
        closeAll();
        return;
      }
      drop(r);  // died after its message: the next round shows it gone
    }
  }
  closeAll();
}

OobClient::~OobClient() { close(false); }

void OobClient::connect(const std::string& host, int port, int rank, int world, int timeoutSec) {
  world_ = world;
  alive_.assign(world, true);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  std::string lastErr = "timeout";
  // "[fd31::1]" (as MASTER_ADDR may be written) is the address inside the brackets.
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;  // IPv4 or IPv6, whichever the name gives
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(name.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      lastErr = std::string("resolve ") + host + ": " + gai_strerror(gai);
    } else {
      int fd = -1;
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        lastErr = std::string("connect ") + host + ":" + std::to_string(port) + ": " +
                  std::strerror(errno);
        if (fd >= 0) ::close(fd);
        fd = -1;
      }
      if (fd >= 0) {
        freeaddrinfo(res);
        setNoDelay(fd);
        char hello[12];
        uint32_t r = htonl(static_cast<uint32_t>(rank)), w = htonl(static_cast<uint32_t>(world));
        std::memcpy(hello, "XCTS", 4);
        std::memcpy(hello + 4, &r, 4);
        std::memcpy(hello + 8, &w, 4);
        if (!writeAll(fd, hello, 12)) {
          ::close(fd);
          throw std::runtime_error("out-of-band hello failed");
        }
        fd_ = fd;
        return;
      }
      freeaddrinfo(res);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error("out-of-band rendezvous failed: " + lastErr);
}

std::vector<std::string> OobClient::allgather(const std::string& mine) {
  if (fd_ < 0 || !writeMsg(fd_, mine)) {
    throw std::runtime_error("out-of-band channel closed (another rank failed)");
  }
  std::vector<std::string> all(world_);
  for (int r = 0; r < world_; ++r) {
    const int rc = readMsg(fd_, &all[r]);
    if (rc == 3) {
      alive_[r] = false;
      continue;
    }
    if (rc != 0) throw std::runtime_error("out-of-band channel closed (another rank failed)");
  }
  return all;
}

void OobClient::close(bool clean) {
  if (fd_ >= 0 && clean) {
    uint64_t bye = toBe64(kGoodbye);
    writeAll(fd_, &bye, 8);
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace xt
