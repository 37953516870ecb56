// TCP transport: one nonblocking socket per peer pair with user-space send and receive
// rings (XCCL_SOCKET_BUFFSIZE each), so the engine gets windows exactly as with shared
// memory; progress() moves bytes between the rings and the kernel.
//
// Connection setup: every rank listens on an ephemeral port; the lower rank of a pair
// connects to the higher one and both prove they know the communicator's secret without
// sending it (handshake.h); anything else (a wrong or replayed proof, garbage, a duplicate,
// silence) is refused, logged once at WARN, and never becomes a Connection.
//
// Files: listener.cc (Listener, the acceptor), connector.cc (connectPeer), stream.{h,cc}
// (the data path both hand their authenticated sockets to).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "collectives/transport/transport.h"
#include "socket.h"

namespace xccl {

class Device;

namespace tcp {

class Listener {
 public:
  // Binds to `addr` (port 0 = ephemeral).
  explicit Listener(const sockaddr_in& addr);
  std::string address() const { return address_; }  // "ip:port"

  // Accepts and authenticates one connection from each rank in `from`, refusing anything
  // else, until all arrived (or the wait in ctx fails). Returns them by rank.
  std::map<int, std::unique_ptr<Connection>> acceptPeers(int rank, std::set<int> from,
                                                         const std::string& secret, Device& device,
                                                         const net::WaitCtx& ctx);
  void close() { fd_.reset(); }

 private:
  net::Fd fd_;
  std::string address_;
};

// Connects to `peer` listening at `peerAddr`, authenticates, and returns the Connection.
std::unique_ptr<Connection> connectPeer(int rank, int peer, const std::string& peerAddr,
                                        const std::string& secret, Device& device,
                                        const net::WaitCtx& ctx);

}  // namespace tcp
}  // namespace xccl
