// Windows and one-sided put/signal (xcclCommWindowRegister, xcclPutSignal, xcclSignal,
// xcclWaitSignal; docs/MEMORY.md): a buffer of the same size on every rank, which the
// other ranks of its host write straight into, and per-communicator signal counters that
// tell the owner how many puts (or bare signals) each peer has completed.
//
// Every rank's window and its signal pad are memory its host's peers map (xcclMemAlloc
// memory, exported as for peer reads, device.h). A put copies into the mapped window, then
// adds one to the owner's counter for (sender, sigIdx) with release order; a wait reads its
// own counters with acquire order, so the data of every counted put is visible. On a host
// communicator they run on the calling thread, after every operation enqueued before it; on
// a device communicator whose memory the host addresses (xdev) they are operations ordered on
// the caller's stream, as NCCL orders them on a CUDA stream: each runs after the stream's
// earlier work and the communicator's earlier operations, and the stream's later work waits
// for it. A peer on another host has no mapping (a put to it is refused).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xccl.h"

namespace xccl {

class Comm;

constexpr int kWindowSignals = 16;  // sigIdx in [0, 16), per sending rank

// One registered window of one rank: its own bytes and where it sees each peer's.
struct Window {
  Comm* comm = nullptr;
  char* base = nullptr;
  size_t bytes = 0;
  std::vector<char*> peerBase;  // by rank: the peer's window mapped here (self: base;
                                // nullptr: a rank on another host)
};

class Windows {
 public:
  explicit Windows(Comm& comm) : comm_(comm) {}
  ~Windows();
  // Collective over the communicator: every rank passes a buffer of the same size.
  Window* registerWindow(void* buff, size_t bytes);
  void deregisterWindow(Window* win);  // collective (a barrier) as well
  // Arguments are checked at the call (InvalidArgument, InvalidUsage: nothing is queued);
  // `stream` is NULL or XCCL_STREAM_CALLER on a host communicator, an xdev stream (NULL: the
  // device's default one) on a device communicator.
  void putSignal(const void* src, size_t bytes, int peer, Window* win, size_t offset, int sigIdx,
                 xcclStream_t stream);
  void signal(int peer, int sigIdx, xcclStream_t stream);
  // Waits until `opCnt` more signals of (peer, sigIdx) than earlier waits consumed arrived.
  void waitSignal(int peer, int sigIdx, int opCnt, xcclStream_t stream);

 private:
  // Runs `action` after every operation enqueued before it: on the calling thread (host
  // communicators), or as an operation on `stream` (device communicators).
  void inOrder(xcclStream_t stream, std::function<void()> action);
  // Polls this rank's counter until it reaches `want` (a wait's target); throws when the
  // peer's process exits, the communicator fails, or its timeout passes.
  void awaitCounter(const uint64_t* counter, uint64_t want, int peer, int sigIdx, int opCnt);
  Window* owned(Window* win, const char* what);
  void checkPeer(int peer, int sigIdx, const char* what) const;
  uint64_t* peerCounter(int peer, int sigIdx) const;   // peer's counter for (me, sigIdx)
  void exchange(void* mine, size_t bytes, void* all);  // allgather on the caller, waited

  Comm& comm_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Window>> windows_;
  uint64_t* pad_ = nullptr;          // this rank's counters: [sender][sigIdx]
  std::vector<uint64_t*> peerPads_;  // by rank: that rank's pad mapped here (nullptr: remote)
  std::vector<uint64_t> consumed_;   // [sender][sigIdx]: signals earlier waits took
};

}  // namespace xccl
