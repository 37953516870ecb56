// The connecting side of connection setup (connection.h): the lower rank of a pair opens
// its data sockets and the heartbeat socket one after another, each proving the secret
// and checking the acceptor's proof (handshake.h), then hands them to the data path.
#include "connection.h"

#include <utility>
#include <vector>

#include "common/error.h"
#include "common/param.h"
#include "handshake.h"
#include "stream.h"

namespace xccl {
namespace tcp {

// Sockets per peer: the byte stream is striped over them in chunks of XCCL_SOCKET_CHUNK
// bytes (chunk c on socket c mod n), so one connection can fill a link that one TCP flow
// does not (long round trips, loss). 1 by default: on the links measured so far (two
// namespace hosts over veth, bare and rate-limited; BENCHMARKS.md section 9) one flow
// already reached the link's or the cores' limit and more sockets only cost latency.
// The connecting side decides; the acceptor follows its handshake.
XCCL_PARAM(Nsocks, "NSOCKS", 1, 1, 64)
XCCL_PARAM(SocketChunk, "SOCKET_CHUNK", 128 << 10, 4096, 64 << 20)

std::unique_ptr<Connection> connectPeer(int rank, int peer, const std::string& peerAddr,
                                        const std::string& secret, Device& device,
                                        const net::WaitCtx& ctx, bool peerListening) {
  const int64_t nsocks = xcclParamNsocks(), chunk = xcclParamSocketChunk();
  XCCL_CHECK(nsocks >= 1 && nsocks <= kMaxSocks, "XCCL_NSOCKS=", nsocks, " must be 1..", kMaxSocks);
  XCCL_CHECK(chunk >= kMinChunk && chunk <= kMaxChunk && chunk % 64 == 0,
             "XCCL_SOCKET_CHUNK=", chunk, " must be a multiple of 64 between ", kMinChunk, " and ",
             kMaxChunk);
  std::vector<net::Fd> fds;
  auto refused = [&](uint32_t status) {
    return RemoteError(strCat(ctx.what, ": refused by peer: ",
                              status == kBadSecret ? "bad secret (another communicator?)"
                                                   : "unexpected rank or striping"));
  };
  // Sockets 0..nsocks-1 carry the byte stream, socket nsocks the heartbeats.
  for (uint32_t j = 0; j <= static_cast<uint32_t>(nsocks); ++j) {
    net::Fd fd = peerListening ? net::connectOnce(net::parseAddr(peerAddr), ctx)
                               : net::connectTo(net::parseAddr(peerAddr), ctx);
    const std::string mine = auth::nonce();
    std::string hello = makeHello(
        Hello{rank, peer, j, static_cast<uint32_t>(nsocks), static_cast<uint32_t>(chunk), mine});
    net::sendAll(fd.get(), hello.data(), hello.size(), ctx);
    // The challenge (or, refused, a 12-byte reply).
    std::string c(kReplyBytes, '\0');
    net::recvAll(fd.get(), &c[0], kReplyBytes, ctx);
    if (isChallenge(c)) {
      c.resize(kChallengeBytes);
      net::recvAll(fd.get(), &c[kReplyBytes], kChallengeBytes - kReplyBytes, ctx);
    }
    std::string theirs, theirProof;
    uint32_t status = kOk;
    const int kind = parseChallenge(c, peer, &theirs, &theirProof, &status);
    if (kind == 1) throw refused(status);
    if (kind < 0 || status != kOk) {
      throw RemoteError(
          strCat(ctx.what, ": bad handshake reply (is ", peerAddr, " an xccl rank?)"));
    }
    const std::string context = proofContext(rank, peer, j);
    if (!auth::sameProof(theirProof, auth::proof(secret, "acceptor", mine, theirs, context))) {
      throw RemoteError(strCat(ctx.what, ": ", peerAddr,
                               " does not know this communicator's "
                               "secret (another job listening on that address?)"));
    }
    const std::string proof = auth::proof(secret, "connector", theirs, mine, context);
    net::sendAll(fd.get(), proof.data(), proof.size(), ctx);
    std::string reply(kReplyBytes, '\0');
    net::recvAll(fd.get(), &reply[0], kReplyBytes, ctx);
    uint32_t st = kOk;
    if (!parseReply(reply, peer, &st)) {
      throw RemoteError(
          strCat(ctx.what, ": bad handshake reply (is ", peerAddr, " an xccl rank?)"));
    }
    if (st != kOk) throw refused(st);
    fds.push_back(std::move(fd));
  }
  return makeStreamConnection(rank, peer, peerAddr, std::move(fds), static_cast<size_t>(chunk),
                              device);
}

}  // namespace tcp
}  // namespace xccl
