// TCP transport: one nonblocking socket per peer pair with user-space send and receive
// rings (XCCL_SOCKET_BUFFSIZE each), so the engine gets windows exactly as with shared
// memory; progress() moves bytes between the rings and the kernel.
//
// Connection setup: every rank listens on an ephemeral port; the lower rank of a pair
// connects to the higher one and both prove they know the communicator's secret without
// sending it (handshake.h); anything else (a wrong or replayed proof, garbage, a duplicate,
// silence) is refused, logged once at WARN, and never becomes a Connection.
//
// With XCCL_RUNTIME_CONNECT=1 (the default) a pair connects when an operation first needs
// it (lazy.cc): the lower rank connects then, the higher rank's Acceptor thread answers.
//
// Files: listener.cc (Listener, the acceptor), connector.cc (connectPeer), lazy.cc
// (Acceptor, the connections made on first use), stream.{h,cc} (the data path all hand
// their authenticated sockets to).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/transport/transport.h"
#include "socket.h"

namespace xccl {

class Device;

namespace tcp {

class Listener {
 public:
  // Binds to `addr` (port 0 = ephemeral).
  explicit Listener(const net::SockAddr& addr);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  std::string address() const { return address_; }  // "ip:port"

  // Accepts and authenticates one connection from each rank in `from`, refusing anything
  // else, until all arrived (or the wait in ctx fails). Returns them by rank.
  std::map<int, std::unique_ptr<Connection>> acceptPeers(int rank, std::set<int> from,
                                                         const std::string& secret, Device& device,
                                                         const net::WaitCtx& ctx);
  // One round of that loop: waits up to pollMs (-1: no limit) for the listening socket, a
  // handshake under way or wakeFd (when >= 0) to be readable, advances every handshake,
  // adds each peer whose sockets have all arrived to *out and removes it from *from. ctx
  // bounds the handshake's own sends.
  void acceptStep(int rank, std::set<int>* from, const std::string& secret, Device& device,
                  const net::WaitCtx& ctx, int pollMs,
                  std::map<int, std::unique_ptr<Connection>>* out, int wakeFd = -1);
  bool handshaking() const { return !pending_.empty(); }
  void close() { fd_.reset(); }

 private:
  struct Pending;
  struct Partial;
  static void refuse(const Pending& p, int rank, uint32_t status, const std::string& why);
  net::Fd fd_;
  std::string address_;
  std::vector<Pending> pending_;
  std::map<int, Partial> partial_;
};

// Connects to `peer` listening at `peerAddr`, authenticates, and returns the Connection.
// peerListening: the peer's listener is known to be up (it published its address after
// listening, and keeps listening: connections made on first use), so a refusal means its
// process is gone (RemoteError) instead of a reason to try again until the deadline.
std::unique_ptr<Connection> connectPeer(int rank, int peer, const std::string& peerAddr,
                                        const std::string& secret, Device& device,
                                        const net::WaitCtx& ctx, bool peerListening = false);

// The higher rank's side of TCP pairs connected on first use: a thread that keeps the
// communicator's listener open and accepts, authenticates and keeps the connection of each
// lower rank in `from` whenever that rank first needs the pair, whatever this rank is doing
// (so a connecting rank never waits on its peer's progress). take() hands one over. It runs
// until the communicator closes, also with `from` empty: peers waiting for this rank probe
// that it still listens (a socket closed before its first byte is such a probe).
class Acceptor {
 public:
  Acceptor(std::unique_ptr<Listener> listener, int rank, std::set<int> from, std::string secret,
           Device& device);
  ~Acceptor();  // stops the thread, closes the listener
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;
  // The connection `peer` made, once it has; null before (never blocks).
  std::unique_ptr<Connection> take(int peer);
  // Stops accepting (a closed communicator): later connects are refused. After leaveNote(),
  // it keeps accepting instead, to hand each late connector the note and close (until the
  // Acceptor is destroyed), so that a peer first needing the pair after this rank failed
  // learns why, as it would from a connection made earlier.
  void close();
  // The reason this rank's communicator failed: left on the connections it holds now, and
  // on those it accepts after close().
  void leaveNote(const std::string& why);
  // Beats every `ms` on the connections it holds (0: not), so that a lower rank that
  // connected while this rank's engine has not reached the pair yet (a late first
  // operation) still hears it (core/heartbeat.h); its engine's heartbeat takes over at take().
  void beatHeld(int64_t ms) { beatMs_.store(ms); }

 private:
  void loop();
  void stopThread();  // after stop_: wakes, joins the thread, closes the listener
  std::unique_ptr<Listener> listener_;
  int rank_;
  std::set<int> from_;
  std::string secret_;
  Device& device_;
  std::mutex mu_;
  std::map<int, std::unique_ptr<Connection>> ready_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> closed_{false};  // close() with a note: accept, leave it, close
  std::string note_;                 // guarded by mu_
  std::atomic<int64_t> beatMs_{0};
  net::Fd wake_;  // an eventfd: close() wakes the thread out of its wait
  std::thread thread_;
};

// A TCP pair connected on first use (XCCL_RUNTIME_CONNECT=1): the engine gets this at the
// pair's first send or receive. The lower rank connects (one handshake with the peer's
// Acceptor thread, not with the peer's progress; `connectMs` bounds it); the higher rank's
// side takes the connection from its Acceptor when it has arrived. Until then no bytes move
// (reserveSend and peekRecv find nothing), and peerGone() reports a connect that failed, or
// what `peerLost` says (asked every 250 ms while waiting: "" = no verdict; a probe of the
// peer's process).
// A failing rank's note for a higher peer it never connected to (it would wait for us to
// connect): connects (as the lower rank does), leaves `why`, closes. Best effort, bounded
// by connectMs; never throws.
void deliverNote(int rank, int peer, const std::string& peerAddr, const std::string& secret,
                 Device& device, int64_t connectMs, const std::string& why);

std::unique_ptr<Connection> makeLazyConnection(int rank, int peer, const std::string& peerAddr,
                                               const std::string& secret, Device& device,
                                               Acceptor* acceptor, int64_t connectMs,
                                               std::function<std::string()> peerLost);

}  // namespace tcp
}  // namespace xccl
