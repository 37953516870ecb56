// The built-in network table (XCCL_NET_PLUGIN=socket): xcclNet_v1 over libxccl's own
// nonblocking TCP sockets (tcp/socket.h), so that the plugin seam and the connection above it
// (net/connection.cc) run the whole conformance suite with no plugin installed, and a vendor
// reads a complete implementation of the table next to the ABI.
//
// One socket per send/recv pair. A message is an 8-byte little-endian length and the bytes.
// Requests on a communicator progress strictly in posting order (the head first), which is
// the ABI's matching order; test() of any request moves its communicator's queue.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/transport/tcp/socket.h"
#include "common/error.h"
#include "plugin.h"

namespace xccl::net {
namespace {

constexpr uint32_t kHandleMagic = 0x584e5331;  // "XNS1"
xcclNetLogger_t logger = nullptr;

struct Handle {
  uint32_t magic;
  uint16_t family;  // AF_INET or AF_INET6
  uint16_t port;    // network order
  unsigned char addr[16];
};
static_assert(sizeof(Handle) <= XCCL_NET_HANDLE_MAXSIZE, "a handle fits the ABI's room");

struct Comm;

struct Request {
  Comm* comm = nullptr;
  bool send = false;
  unsigned char* data = nullptr;
  size_t size = 0;    // send: the message; recv: the room
  size_t length = 0;  // recv: the message's length once its header is in
  size_t header = 0;  // header bytes moved
  size_t moved = 0;   // payload bytes moved
  unsigned char hdr[8] = {};
  bool done = false;
};

struct Comm {
  Fd fd;
  std::deque<Request*> queue;       // posted, not complete, in order
  std::vector<Request*> completed;  // complete, not yet reported by test()
  std::string broken;               // why the socket is unusable ("" while fine)
  // Receives: bytes a read brought beyond the request it was for (the next messages' start).
  unsigned char carry[4096];
  size_t carryOff = 0, carryLen = 0;
  ~Comm() {
    for (Request* r : queue) delete r;
    for (Request* r : completed) delete r;
  }
};

struct Listen {
  Fd fd;
};

// Connects in progress, by handle (the ABI calls connect again with the same handle).
std::mutex pendingMu;
std::map<std::string, int> pendingConnects;

// The socket is unusable from now on. A peer that closed its end is told at INFO: it is how
// every pair ends when a communicator is destroyed, and a peer that died mid-operation is
// named by libxccl's own error; a socket error is a WARN.
xcclResult_t fail(Comm* c, const std::string& why, xcclNetLogLevel_t level = XCCL_NET_LOG_WARN) {
  if (c->broken.empty()) {
    c->broken = why;
    if (logger) logger(level, "%s", why.c_str());
  }
  return xcclRemoteError;
}

// Moves as many bytes as the socket takes for the head requests, in order.
// Moves the head send's bytes; *drained: the socket took less than offered (its buffer is
// full: another call now would only answer EAGAIN), and no more calls are made.
xcclResult_t moveSend(Comm* c, Request* r, bool* drained) {
  const int fd = c->fd.get();
  while (!*drained && (r->header < 8 || r->moved < r->size)) {
    iovec iov[2];
    int parts = 0;
    if (r->header < 8) iov[parts++] = {r->hdr + r->header, 8 - r->header};
    if (r->moved < r->size) iov[parts++] = {r->data + r->moved, r->size - r->moved};
    size_t offered = 0;
    for (int i = 0; i < parts; ++i) offered += iov[i].iov_len;
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = static_cast<size_t>(parts);
    const ssize_t n = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return fail(c, strCat("send to ", peerAddrOf(fd), ": ", strerror(errno)));
      }
      *drained = true;
      break;
    }
    const size_t sent = static_cast<size_t>(n);
    const size_t ofHeader = std::min(sent, 8 - r->header);
    r->header += ofHeader;
    r->moved += sent - ofHeader;
    *drained = sent < offered;
  }
  return xcclSuccess;
}

// Up to `want` bytes out of the carry (what a read brought beyond the request it was for).
size_t fromCarry(Comm* c, unsigned char* to, size_t want) {
  const size_t n = std::min(want, c->carryLen);
  if (n == 0) return 0;
  memcpy(to, c->carry + c->carryOff, n);
  c->carryOff += n;
  c->carryLen -= n;
  return n;
}

// A receive's header is in: its message's length, which must fit the receive's room.
bool lengthKnown(Comm* c, Request* r, int fd) {
  r->length = getU64(r->hdr);
  if (r->length <= r->size) return true;
  fail(c, strCat("a message of ", r->length, " B from ", peerAddrOf(fd), " for a receive of ",
                 r->size, " B"));
  return false;
}

// Moves the head receive's bytes: first from the carry, then from the socket, each read also
// filling the carry with whatever follows. A header is thus read with the start of its payload,
// and a stream of small messages costs one call for several. *drained: the socket had fewer
// bytes than asked for (another call now would only answer EAGAIN), and no more calls are made.
xcclResult_t moveRecv(Comm* c, Request* r, bool* drained) {
  const int fd = c->fd.get();
  for (;;) {
    if (r->header < 8) {
      r->header += fromCarry(c, r->hdr + r->header, 8 - r->header);
      if (r->header == 8 && !lengthKnown(c, r, fd)) return xcclRemoteError;
    }
    if (r->header == 8) r->moved += fromCarry(c, r->data + r->moved, r->length - r->moved);
    if ((r->header == 8 && r->moved == r->length) || *drained) return xcclSuccess;
    // The carry is empty: read what this request still needs, and what follows into the carry.
    c->carryOff = 0;
    iovec iov[2];
    iov[0] = r->header < 8 ? iovec{r->hdr + r->header, 8 - r->header}
                           : iovec{r->data + r->moved, r->length - r->moved};
    iov[1] = {c->carry, sizeof(c->carry)};
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    const ssize_t n = ::recvmsg(fd, &mh, 0);
    if (n == 0) {
      return fail(c, strCat("the peer at ", peerAddrOf(fd), " closed the pair"), XCCL_NET_LOG_INFO);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return fail(c, strCat("receive from ", peerAddrOf(fd), ": ", strerror(errno)));
      }
      *drained = true;
      return xcclSuccess;
    }
    const size_t got = static_cast<size_t>(n);
    const size_t first = std::min(got, iov[0].iov_len);
    if (r->header < 8) {
      r->header += first;
      if (r->header == 8 && !lengthKnown(c, r, fd)) return xcclRemoteError;
    } else {
      r->moved += first;
    }
    c->carryLen = got - first;
    *drained = got < iov[0].iov_len + iov[1].iov_len;
  }
}

// Moves the queue's requests in order as far as the socket allows, completing them.
xcclResult_t progress(Comm* c) {
  bool drained = false;
  while (!c->queue.empty()) {
    if (!c->broken.empty()) return xcclRemoteError;
    Request* r = c->queue.front();
    const xcclResult_t res = r->send ? moveSend(c, r, &drained) : moveRecv(c, r, &drained);
    if (res != xcclSuccess) return res;
    if (r->header < 8 || r->moved < (r->send ? r->size : r->length)) return xcclSuccess;
    r->done = true;
    c->queue.pop_front();
    c->completed.push_back(r);
  }
  return xcclSuccess;
}

xcclResult_t init(xcclNetLogger_t log) {
  logger = log;
  return xcclSuccess;
}

xcclResult_t devices(int* ndev) {
  if (ndev == nullptr) return xcclInvalidArgument;
  *ndev = 1;
  return xcclSuccess;
}

xcclResult_t getProperties(int dev, xcclNetProperties_v1_t* props) {
  if (dev != 0 || props == nullptr) return xcclInvalidArgument;
  try {
    *props = xcclNetProperties_v1_t{};
    Interface ifc;
    std::string how, why;
    const std::string name = chosenInterface(&ifc, &how, &why) ? ifc.name : "lo";
    snprintf(props->name, sizeof(props->name), "%s", name.c_str());
    snprintf(props->address, sizeof(props->address), "%s", localAddress().host().c_str());
    props->ptrSupport = XCCL_NET_PTR_HOST;
    props->regIsGlobal = 1;
    props->maxMessageBytes = size_t{1} << 40;
    return xcclSuccess;
  } catch (const Error&) {
    return xcclSystemError;
  }
}

xcclResult_t listen(int dev, void* handle, void** listenComm) {
  if (dev != 0 || handle == nullptr || listenComm == nullptr) return xcclInvalidArgument;
  try {
    auto* l = new Listen{listenOn(localAddress())};
    const SockAddr at = boundAddr(l->fd.get());
    Handle h{};
    h.magic = kHandleMagic;
    h.family = static_cast<uint16_t>(at.family());
    h.port = htons(at.port());
    if (at.family() == AF_INET6) {
      memcpy(h.addr, &reinterpret_cast<const sockaddr_in6*>(at.sa())->sin6_addr, 16);
    } else {
      memcpy(h.addr, &reinterpret_cast<const sockaddr_in*>(at.sa())->sin_addr, 4);
    }
    memset(handle, 0, XCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, &h, sizeof(h));
    *listenComm = l;
    return xcclSuccess;
  } catch (const Error& e) {
    if (logger) logger(XCCL_NET_LOG_WARN, "listen: %s", e.what());
    return xcclSystemError;
  }
}

// A connected socket becomes a communicator (either direction).
xcclResult_t adopt(int fd, void** comm) {
  try {
    setNonblockingNoDelay(fd);
  } catch (const Error&) {
    ::close(fd);
    return xcclSystemError;
  }
  auto* c = new Comm;
  c->fd.reset(fd);
  *comm = c;
  return xcclSuccess;
}

xcclResult_t connect(int dev, const void* handle, void** sendComm) {
  if (dev != 0 || handle == nullptr || sendComm == nullptr) return xcclInvalidArgument;
  *sendComm = nullptr;
  Handle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kHandleMagic || (h.family != AF_INET && h.family != AF_INET6)) {
    return xcclInvalidArgument;
  }
  const std::string key(static_cast<const char*>(handle), sizeof(h));
  std::lock_guard<std::mutex> g(pendingMu);
  auto it = pendingConnects.find(key);
  if (it == pendingConnects.end()) {
    sockaddr_storage ss{};
    if (h.family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_port = h.port;
      memcpy(&a->sin6_addr, h.addr, 16);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_port = h.port;
      memcpy(&a->sin_addr, h.addr, 4);
    }
    const SockAddr to(reinterpret_cast<const sockaddr*>(&ss));
    const int fd = ::socket(h.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return xcclSystemError;
    if (::connect(fd, to.sa(), to.len()) != 0 && errno != EINPROGRESS) {
      const int err = errno;
      ::close(fd);
      if (logger) {
        logger(XCCL_NET_LOG_WARN, "connect to %s: %s", formatAddr(to).c_str(), strerror(err));
      }
      return err == ECONNREFUSED ? xcclRemoteError : xcclSystemError;
    }
    it = pendingConnects.emplace(key, fd).first;
  }
  pollfd p{it->second, POLLOUT, 0};
  if (::poll(&p, 1, 0) <= 0) return xcclSuccess;  // still connecting: call again
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(it->second, SOL_SOCKET, SO_ERROR, &err, &len);
  const int fd = it->second;
  pendingConnects.erase(it);
  if (err != 0) {
    ::close(fd);
    if (logger) logger(XCCL_NET_LOG_WARN, "connect: %s", strerror(err));
    return err == ECONNREFUSED || err == ECONNRESET ? xcclRemoteError : xcclSystemError;
  }
  return adopt(fd, sendComm);
}

xcclResult_t accept(void* listenComm, void** recvComm) {
  if (listenComm == nullptr || recvComm == nullptr) return xcclInvalidArgument;
  *recvComm = nullptr;
  auto* l = static_cast<Listen*>(listenComm);
  const int fd = ::accept4(l->fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      return xcclSuccess;
    }
    return xcclSystemError;
  }
  return adopt(fd, recvComm);
}

// Sockets read and write any host memory: a token stands for the registration.
int registrationToken;

xcclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (comm == nullptr || mhandle == nullptr || (data == nullptr && size > 0)) {
    return xcclInvalidArgument;
  }
  if (type != XCCL_NET_PTR_HOST) return xcclInvalidArgument;
  *mhandle = &registrationToken;
  return xcclSuccess;
}

xcclResult_t deregMr(void* comm, void* mhandle) {
  return comm == nullptr || mhandle != &registrationToken ? xcclInvalidArgument : xcclSuccess;
}

xcclResult_t post(void* comm, void* data, size_t size, bool send, void** request) {
  if (comm == nullptr || request == nullptr || (data == nullptr && size > 0)) {
    return xcclInvalidArgument;
  }
  auto* c = static_cast<Comm*>(comm);
  if (!c->broken.empty()) return xcclRemoteError;
  auto* r = new Request;
  r->comm = c;
  r->send = send;
  r->data = static_cast<unsigned char*>(data);
  r->size = size;
  if (send) {
    std::string h;
    putU64(h, size);
    memcpy(r->hdr, h.data(), 8);
  }
  const bool head = c->queue.empty();
  c->queue.push_back(r);
  *request = r;
  // A send goes out at once. A receive behind others waits for them (test() of any of them
  // moves the queue); one at the head may find its bytes already in. A failure shows in test().
  if (send || head) progress(c);
  return xcclSuccess;
}

xcclResult_t isend(void* sendComm, void* data, size_t size, void* /*mhandle*/, void** request) {
  return post(sendComm, data, size, true, request);
}

xcclResult_t irecv(void* recvComm, void* data, size_t size, void* /*mhandle*/, void** request) {
  return post(recvComm, data, size, false, request);
}

xcclResult_t test(void* request, int* done, size_t* size) {
  if (request == nullptr || done == nullptr) return xcclInvalidArgument;
  auto* r = static_cast<Request*>(request);
  *done = 0;
  if (!r->done) {
    const xcclResult_t res = progress(r->comm);
    if (!r->done) return res;
  }
  *done = 1;
  if (size != nullptr) *size = r->send ? r->size : r->length;
  auto& fin = r->comm->completed;
  fin.erase(std::find(fin.begin(), fin.end(), r));
  delete r;
  return xcclSuccess;
}

xcclResult_t closeComm(void* comm) {
  if (comm == nullptr) return xcclInvalidArgument;
  auto* c = static_cast<Comm*>(comm);
  // Completed requests the caller has not tested yet are its to drop with the comm.
  delete c;
  return xcclSuccess;
}

xcclResult_t closeListen(void* listenComm) {
  if (listenComm == nullptr) return xcclInvalidArgument;
  delete static_cast<Listen*>(listenComm);
  return xcclSuccess;
}

const xcclNet_v1_t kSocketNet = {"socket", init,   devices,   getProperties, listen,
                                 connect,  accept, regMr,     deregMr,       isend,
                                 irecv,    test,   closeComm, closeComm,     closeListen};

}  // namespace

const xcclNet_v1_t* builtinSocketNet() { return &kSocketNet; }

}  // namespace xccl::net
