// Heartbeats: a silent peer is found within XCCL_HEARTBEAT_MS + XCCL_HEARTBEAT_TIMEOUT_MS.
//
// A dead peer is seen at once (its process is gone, its sockets reset), but a peer that is
// stopped (SIGSTOP, a debugger, a hung host) or cut off (a link down with no reset) says
// nothing, and without heartbeats the operations waiting on it would last until the
// communicator's timeout (30 minutes by default). So every communicator has one thread
//
//   every XCCL_HEARTBEAT_MS:  for each peer connection
//                               sendBeat()        we are alive (SHM: a counter in the ring
//                                                 header; TCP: 8 bytes on a socket kept for
//                                                 beats, so beats never wait behind data)
//                               heardFromPeer()   a beat arrived, or the peer moved bytes
//                             silent longer than XCCL_HEARTBEAT_TIMEOUT_MS -> setSilence(why)
//
// and the engine treats a silent peer it is waiting on like a peer that left: the operation
// fails naming the rank, the reason and what was pending, abort frames and closed
// connections reach the other ranks. The verdict is not sticky: a peer that speaks again is
// cleared. The thread never touches the data path, so it costs one wake-up per interval.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/transport/transport.h"
#include "common/clock.h"

namespace xccl {

// How long a peer may stay silent before it counts as lost: XCCL_HEARTBEAT_TIMEOUT_MS, or 0
// when heartbeats are off (XCCL_HEARTBEAT_MS=0). Communicator creation from a parent uses it
// for members that stop answering their bootstrap service (MemberWatch).
int64_t silenceLimitMs();
// XCCL_HEARTBEAT_MS (0: off).
int64_t heartbeatIntervalMs();

class Heartbeat {
 public:
  // conns: indexed by rank, null for self and for peers connected later (add()); they must
  // outlive the Heartbeat. beatAll, when given, is called on every visit too (the arena's
  // rings towards peers not connected yet: they hear us all the same). laterPeers: some
  // peers will be add()ed (pairs connected on first use). Starts no thread when
  // XCCL_HEARTBEAT_MS is 0 or there is no peer, now or later.
  Heartbeat(int rank, const std::vector<Connection*>& conns,
            std::function<void()> beatAll = nullptr, bool laterPeers = false);
  ~Heartbeat();  // stops the thread
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // A connection made after creation (connected on first use); any thread.
  void add(int peer, Connection* c) { conns_[peer].store(c, std::memory_order_release); }

  int64_t intervalMs() const { return intervalMs_; }
  int64_t timeoutMs() const { return timeoutMs_; }

 private:
  void loop();
  void visit(Clock::time_point now);

  int rank_;
  size_t n_;
  std::unique_ptr<std::atomic<Connection*>[]> conns_;
  std::function<void()> beatAll_;
  std::vector<Clock::time_point> lastHeard_;
  std::vector<bool> silent_, seen_;
  int64_t intervalMs_, timeoutMs_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace xccl
