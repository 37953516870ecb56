// Transports: one Connection per peer, a reliable, ordered, nonblocking byte pipe in each
// direction. The progress engine (algorithms/exchange.cc) does all framing on top; a
// transport only moves bytes. Two implementations with the same file names:
//   shm/  - single-producer/single-consumer rings in shared memory (same host)
//   tcp/  - nonblocking sockets with user-space rings (other hosts, or XCCL_SHM_DISABLE=1)
//
// Windows: reserveSend() and peekRecv() expose contiguous ranges of the transport's
// staging memory (registered with the Device) so that the engine copies or reduces
// straight into / out of them. Ring sizes are multiples of 64 bytes and the engine keeps
// every message 32-byte aligned in the stream, so a 32-byte frame header never straddles
// the ring's end and a window never splits an element (TCP may deliver a partial element
// or header, which the engine waits out).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"

namespace xccl {

class Connection {
 public:
  virtual ~Connection() = default;

  // Up to `want` bytes of contiguous free space in the outgoing ring; 0 when full.
  virtual size_t reserveSend(void** window, size_t want) = 0;
  // Publishes `bytes` bytes written at the start of the last reserved window.
  virtual void commitSend(size_t bytes) = 0;
  // Contiguous bytes received and not yet consumed; 0 when none.
  virtual size_t peekRecv(const void** window) = 0;
  // Releases `bytes` bytes at the start of the last peeked window.
  virtual void consumeRecv(size_t bytes) = 0;
  // The payload lane: payload bytes and their pads (never frame headers) go through these.
  // By default they are the byte stream above. A transport may carry payloads apart, in
  // memory only the device touches (the shared-memory transport's rings in shared device
  // memory): then payloadLane() is true for the sending side, windows are device memory that
  // the engine reaches through the Device only, and the lane stays 64-byte aligned because
  // every payload is padded there. Both ends see the same split for each direction.
  virtual bool payloadLane() const { return false; }
  virtual size_t reserveSendPayload(void** window, size_t want) {
    return reserveSend(window, want);
  }
  virtual void commitSendPayload(size_t bytes) { commitSend(bytes); }
  virtual size_t peekRecvPayload(const void** window) { return peekRecv(window); }
  virtual void consumeRecvPayload(size_t bytes) { consumeRecv(bytes); }
  // Moves bytes between user-space rings and the wire (TCP); no-op for shared memory.
  // Returns true when anything moved. A peer that left is not an error here (what it sent
  // before leaving stays readable): see peerGone(). Throws only for a broken connection
  // (corrupt ring, closed locally).
  virtual bool progress() = 0;
  // True while bytes committed with commitSend() have not yet left this process (TCP:
  // still in the user-space ring because the socket was full). The engine keeps
  // progressing such a connection before it reports an operation complete, so that no
  // peer waits on bytes parked here while this rank sits idle.
  virtual bool sendPending() { return false; }
  // Empty while the peer is there; once it has left (closed its end, process died, socket
  // hangup) a few words saying how. Everything the peer sent before leaving can still be
  // read: the engine drains it before deciding whether the departure failed anything.
  // Called by idle progress loops now and then; may cost a syscall.
  virtual std::string peerGone() = 0;
  // Marks this side closed so the peer sees peerGone() at once. Idempotent, never throws.
  virtual void close() = 0;
  // Whether the peer rings this rank's doorbell whenever it moves bytes on this connection
  // (shared memory, shm/doorbell.h): an engine waiting only on such connections may sleep.
  virtual bool ringsDoorbell() const { return false; }
  // "SHM" or "TCP"
  virtual const char* kind() const = 0;
  // False while a pair connected on first use waits for its handshake (tcp/lazy.cc).
  virtual bool connected() const { return true; }
  // Bytes of shared memory this side's outgoing ring occupies and owns (0 for TCP, and for
  // a ring that lives in the rank's arena, which counts it).
  virtual size_t ownedSharedBytes() const { return 0; }
  virtual int peer() const = 0;

  // Peer reads (single-copy transfers, algorithms/exchange_progress.cc): the receiver reads the
  // sender's buffer in place, mapped through the Device, instead of the bytes travelling
  // through this connection, and then tells the sender through a counter. Only between
  // processes of one host (shared memory). peerReadsDone(): how many of this side's
  // peer-read messages the peer has finished reading; peerReadDone(): one more of the
  // peer's read here.
  virtual bool peerReads() const { return false; }
  virtual int peerPid() const { return 0; }
  virtual uint64_t peerReadsDone() { return 0; }
  virtual void peerReadDone() {}

  // A failing rank's reason, left where the peer can read it even when this side's stream
  // is in the middle of a frame and no abort frame fits (the shared-memory ring header);
  // peerNote() is the peer's, "" when it left none or the transport has no such place.
  virtual void leaveNote(const std::string& /*why*/) {}
  virtual std::string peerNote() { return ""; }
  // How long a peer's note may trail its departure (TCP: it travels on another socket than
  // the end of the data); a rank blaming a departed peer waits that long for its note.
  virtual int noteLagMs() const { return 0; }

  // Heartbeats (core/heartbeat.h). Called only by the communicator's heartbeat thread, never
  // by the engine: sendBeat() shows the peer that this process is alive (a word in shared
  // memory, or a few bytes on a socket kept for beats); heardFromPeer() says whether the peer
  // showed life since the last call (a beat, or bytes it moved on this connection), and may
  // add to *note what the transport knows about a silent peer ("process 12 is stopped").
  // A connection without heartbeats always says it heard.
  virtual void sendBeat() {}
  virtual bool heardFromPeer(std::string* /*note*/) { return true; }
  // The heartbeat thread's verdict: non-empty while the peer has been silent for too long.
  // The engine treats it like peerGone() for the peers it waits on.
  void setSilence(const std::string& why) {
    std::lock_guard<std::mutex> g(silenceMu_);
    silence_ = why;
    silent_.store(!why.empty(), std::memory_order_release);
  }
  std::string silence() const {
    if (!silent_.load(std::memory_order_acquire)) return "";
    std::lock_guard<std::mutex> g(silenceMu_);
    return silence_;
  }

 private:
  std::atomic<bool> silent_{false};
  mutable std::mutex silenceMu_;
  std::string silence_;
};

}  // namespace xccl
