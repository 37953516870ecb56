// The acceptor's side of connection setup (connection.h): one poll loop over the listening
// socket and every accepted socket whose handshake is under way, each a small state
// machine (hello -> challenge sent -> proof), so one slow or hostile socket never holds up
// the peers behind it. A peer's sockets are gathered until all of them arrived.
#include "connection.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "handshake.h"
#include "stream.h"

namespace xccl {
namespace tcp {
namespace {

constexpr int kHandshakeMs = 5000;  // an accepted socket must finish its handshake within this

}  // namespace

// Sockets of a peer that has not connected all of its sockets yet.
struct Listener::Partial {
  std::vector<net::Fd> fds;
  uint32_t arrived = 0, chunk = 0;
  std::string addr;
};

// An accepted socket whose handshake is not finished.
struct Listener::Pending {
  net::Fd fd;
  std::string addr;
  std::string in;           // bytes of the current stage received so far
  bool challenged = false;  // hello verified and challenge sent: waiting for the proof
  int src = -1;
  uint32_t index = 0;  // its socket index, once the hello is verified
  std::string nonce;   // ours (the acceptor's), once challenged
  std::string theirNonce;
  Clock::time_point since = Clock::now();
};

// Answers a refused socket (best effort, so a misconfigured rank learns why) and logs once.
void Listener::refuse(const Pending& p, int rank, uint32_t status, const std::string& why) {
  XCCL_WARN(NET, "rank ", rank, ": refused connection from ", p.addr, ": ", why);
  if (status != kOk) {
    std::string r = makeReply(static_cast<Status>(status), rank);
    ::send(p.fd.get(), r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

Listener::Listener(const net::SockAddr& addr) : fd_(net::listenOn(addr)) {
  address_ = net::formatAddr(net::boundAddr(fd_.get()));
}

Listener::~Listener() = default;

std::map<int, std::unique_ptr<Connection>> Listener::acceptPeers(int rank, std::set<int> from,
                                                                 const std::string& secret,
                                                                 Device& device,
                                                                 const net::WaitCtx& ctx) {
  std::map<int, std::unique_ptr<Connection>> out;
  while (!from.empty()) {
    if (ctx.abortFlag && ctx.abortFlag->load()) throw InvalidUsage(strCat(ctx.what, ": aborted"));
    if (ctx.deadline.expired()) {
      throw Timeout(strCat(ctx.what, ": timed out after ", ctx.deadline.budgetMs(),
                           " ms; still missing ", from.size(), " rank(s), e.g. rank ",
                           *from.begin()));
    }
    acceptStep(rank, &from, secret, device, ctx, 50, &out);
  }
  return out;
}

void Listener::acceptStep(int rank, std::set<int>* from, const std::string& secret, Device& device,
                          const net::WaitCtx& ctx, int pollMs,
                          std::map<int, std::unique_ptr<Connection>>* out, int wakeFd) {
  std::vector<pollfd> fds(1, pollfd{fd_.get(), POLLIN, 0});
  for (auto& p : pending_) fds.push_back({p.fd.get(), POLLIN, 0});
  if (wakeFd >= 0) fds.push_back({wakeFd, POLLIN, 0});  // last: the indices above stay
  int n = ::poll(fds.data(), fds.size(), pollMs);
  if (n < 0 && errno != EINTR) XCCL_SYSCHECK(n, strCat(ctx.what, ": poll"));
  for (size_t i = pending_.size(); i-- > 0;) {
    Pending& p = pending_[i];
    bool drop = false;
    const size_t need = p.challenged ? auth::kProofBytes : kHelloBytes;
    if (fds[i + 1].revents) {
      char buf[kHelloBytes > auth::kProofBytes ? kHelloBytes : auth::kProofBytes];
      ssize_t got = ::recv(p.fd.get(), buf, need - p.in.size(), MSG_DONTWAIT);
      if (got > 0) {
        p.in.append(buf, static_cast<size_t>(got));
      } else if (got == 0 && !p.challenged && p.in.empty()) {
        drop = true;  // closed before a byte: a peer probing that we still listen (lazy.cc)
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        XCCL_WARN(NET, "rank ", rank, ": refused connection from ", p.addr,
                  ": closed during handshake (", p.challenged ? "proof" : "hello", ", ",
                  p.in.size(), " of ", need, " bytes)");
        drop = true;
      }
    }
    if (!drop && !p.challenged && p.in.size() == kHelloBytes) {
      Hello hi;
      Status status;
      std::string why;
      if (!parseHello(p.in, rank, *from, &hi, &status, &why)) {
        refuse(p, rank, status, why);
        drop = true;
      } else {
        p.src = hi.from;
        p.theirNonce = hi.nonce;
        Partial& part = partial_[p.src];
        if (part.fds.empty()) {
          part.fds.resize(hi.nsocks + 1);  // the data sockets and the heartbeat socket
          part.chunk = hi.chunk;
          part.addr = p.addr;
        }
        if (part.fds.size() != hi.nsocks + 1 || part.chunk != hi.chunk ||
            part.fds[hi.index].get() >= 0) {
          refuse(p, rank, kBadRank,
                 strCat("socket ", hi.index, " of ", hi.nsocks, " from rank ", p.src,
                        " does not fit the ones it already opened"));
          drop = true;
        } else {
          // Challenge: our nonce and our proof over theirs.
          p.nonce = auth::nonce();
          std::string c = makeChallenge(kOk, rank, p.nonce,
                                        auth::proof(secret, "acceptor", p.theirNonce, p.nonce,
                                                    proofContext(p.src, rank, hi.index)));
          net::sendAll(p.fd.get(), c.data(), c.size(), ctx);
          p.challenged = true;
          p.in.clear();
          p.since = Clock::now();
          p.index = hi.index;
        }
      }
    } else if (!drop && p.challenged && p.in.size() == auth::kProofBytes) {
      const uint32_t index = p.index;
      const std::string want =
          auth::proof(secret, "connector", p.nonce, p.theirNonce, proofContext(p.src, rank, index));
      Partial& part = partial_[p.src];
      if (!auth::sameProof(p.in, want)) {
        refuse(p, rank, kBadSecret,
               strCat("rank ", p.src,
                      "'s proof does not match this "
                      "communicator's secret (another job, or a replay)"));
        if (part.arrived == 0) partial_.erase(p.src);
      } else {
        std::string reply = makeReply(kOk, rank);
        net::sendAll(p.fd.get(), reply.data(), reply.size(), ctx);
        net::setNonblockingNoDelay(p.fd.get());
        const int src = p.src;
        part.fds[index] = std::move(p.fd);
        if (++part.arrived == part.fds.size()) {
          (*out)[src] =
              makeStreamConnection(rank, src, part.addr, std::move(part.fds), part.chunk, device);
          partial_.erase(src);
          from->erase(src);
        }
      }
      drop = true;
    } else if (!drop && Clock::now() - p.since > std::chrono::milliseconds(kHandshakeMs)) {
      XCCL_WARN(NET, "rank ", rank, ": refused connection from ", p.addr, ": no ",
                p.challenged ? "proof" : "hello", " within ", kHandshakeMs, " ms");
      drop = true;
    }
    if (drop) pending_.erase(pending_.begin() + static_cast<long>(i));
  }
  if (fds[0].revents & POLLIN) {
    for (;;) {
      int fd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      Pending p;
      p.fd.reset(fd);
      p.addr = net::peerAddrOf(fd);
      pending_.push_back(std::move(p));
    }
  }
}

}  // namespace tcp
}  // namespace xccl
