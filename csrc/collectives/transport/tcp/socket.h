// Small socket toolkit shared by the TCP transport and the bootstrap store: IPv4
// addresses, an fd owner, and waits that honour a Deadline and an abort flag.
//
// Every blocking step here is a poll() in short slices, so that a rank stuck on a
// peer that never shows up still notices its deadline and the communicator's abort
// flag; nothing calls a blocking connect/accept/recv.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "interfaces.h"

namespace xccl {
namespace net {

// Owns one file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "a.b.c.d:port" or "[v6 address]:port" <-> SockAddr. parseAddr throws InvalidArgument on
// malformed text.
SockAddr parseAddr(const std::string& text);
std::string formatAddr(const SockAddr& addr);
// An address inside an id's bytes (unique ids, grow ids): IPv4 as 4 address bytes at
// base[0..4), the port (network order) at base[4..6) and base[6] = 0, the layout ids always
// had; IPv6 marks base[6] = 6, keeps the port at base[4..6) and puts its 16 address bytes at
// v6At, room the id keeps for them.
void putIdAddr(const SockAddr& addr, unsigned char* base, unsigned char* v6At);
SockAddr getIdAddr(const unsigned char* base, const unsigned char* v6At);
// The peer address of a connected socket, for logs ("?" when unknown).
std::string peerAddrOf(int fd);

// The address this host advertises, of the family XCCL_SOCKET_FAMILY names (AF_INET, the
// default, or AF_INET6): the interface XCCL_SOCKET_IFNAME selects (NCCL's
// syntax: prefixes, ^exclusions, =exact names; interfaces.h), else the first up interface
// that is neither loopback nor a container bridge, else loopback. Logged once at INFO (NET).
// Throws InvalidUsage, listing the interfaces there are, when nothing matches. Port 0.
SockAddr localAddress();
// The interface XCCL_SOCKET_IFNAME selects on this machine (what localAddress() uses);
// false, with *why, when none matches.
bool chosenInterface(Interface* out, std::string* how, std::string* why);

// A nonblocking listening socket bound to `addr` (port 0 = ephemeral).
Fd listenOn(const SockAddr& addr);
// The address a socket is bound to.
SockAddr boundAddr(int fd);

// Makes fd nonblocking and sets TCP_NODELAY (ignored for non-TCP sockets).
void setNonblockingNoDelay(int fd);

// Thrown-condition helpers: each returns normally only on success, else throws
// Timeout (deadline), InvalidUsage (abort) or IoError/RemoteError (socket failure).
// `what` names the operation and peer for the message.
struct WaitCtx {
  const Deadline& deadline;
  const std::atomic<bool>* abortFlag;  // may be null
  std::string what;                    // e.g. "rank 0: connect to rank 1 (10.0.0.2:4000)"
};

// Waits until fd is ready for `events` (POLLIN/POLLOUT). Returns the revents.
short waitFd(int fd, short events, const WaitCtx& ctx);
// Nonblocking connect with retries on ECONNREFUSED until the deadline.
Fd connectTo(const SockAddr& addr, const WaitCtx& ctx);
// One attempt, to a listener known to be up: refused or reset is RemoteError (its
// communicator closed it, or its process is gone), no answer by the deadline Timeout.
Fd connectOnce(const SockAddr& addr, const WaitCtx& ctx);
// Writes / reads exactly `len` bytes on a nonblocking socket.
void sendAll(int fd, const void* buf, size_t len, const WaitCtx& ctx);
void recvAll(int fd, void* buf, size_t len, const WaitCtx& ctx);

// Constant-time equality of two byte strings (length is not secret).
bool constantTimeEqual(const std::string& a, const std::string& b);

// Little-endian fixed-width integers for wire formats.
void putU32(std::string& out, uint32_t v);
void putU64(std::string& out, uint64_t v);
uint32_t getU32(const unsigned char* p);
uint64_t getU64(const unsigned char* p);

}  // namespace net
}  // namespace xccl
