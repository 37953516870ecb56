// The arena: a rank's outgoing rings towards every other rank of its communicator, made at
// once in one memfd, so that a pair of processes on one host connects on first use, and
// one-sidedly.
//
//   memfd of nranks slots, each page-aligned:  [ slot 0 ][ slot 1 ] ... [ slot n-1 ]
//   slot p = the ring this rank sends to rank p (ring.h layout: header page + ring bytes)
//
// Every slot is sparse until touched: a slot whose pair never talks costs no memory beyond
// its header page (written at creation for the peers on this host), and a pair that talks
// costs its two rings, as eagerly made rings did. The rank publishes "<pid> <fd> <ring
// bytes> <slots>" once (PeerInfo::shm); a peer that needs the pair maps its own slot of that
// memfd (the ring towards it) and pairs it with the slot it owns in its own arena. Neither
// side waits for the other to be in an operation, so connecting on first use cannot deadlock,
// and a send may complete into the ring before the receiver has looked at it. Ranks that
// never talk never map each other: per rank one memfd, one doorbell, and two mappings per
// peer it talks to, where eager set-up had two memfds and three descriptors per peer.
//
// For peers that never connected, the arena itself says what a connection would: closed
// (closeAll), why (leaveNoteAll) and alive (beatAll, from the heartbeat thread).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "collectives/transport/transport.h"
#include "common/clock.h"
#include "common/shared_memory.h"
#include "doorbell.h"

namespace xccl {

class Device;

namespace shm {

class Arena {
 public:
  // Creates the memfd (sparse; no header written yet). Throws IoError when it cannot.
  Arena(int rank, int nranks, const std::string& secret);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // "<pid> <fd> <ring bytes> <slots>": what a peer needs to map its slot.
  std::string describe() const;
  // Writes the header of the ring towards `peer`; a peer that maps its slot first waits for
  // it (connect()).
  void prepare(int peer);

  // The connection with `peer`, whose arena `desc` describes: this rank's slot towards it and
  // its slot towards us, mapped (waiting for its header until the deadline), paired. Throws
  // RemoteError for a malformed description or a ring that is not the peer's, IoError when
  // the peer's memfd cannot be opened (the peer is gone), Timeout, InvalidUsage on abort.
  std::unique_ptr<Connection> connect(int peer, int peerPid, const std::string& desc,
                                      Device& device, std::unique_ptr<Doorbell> peerBell,
                                      const Deadline& deadline, const std::atomic<bool>& abortFlag);

  // On every prepared ring: closed by this rank / this rank's reason / a heartbeat. For the
  // peers that never connected (a connection does the same on its own ring).
  void closeAll();
  void leaveNoteAll(const std::string& why);
  void beatAll();

  size_t ringBytes() const { return ring_; }
  // Bytes of shared memory this rank's rings occupy now (touched pages of the memfd).
  size_t residentBytes() const;

 private:
  void* slot(int peer) const;

  int rank_, nranks_;
  std::string secret_;
  size_t ring_, stride_;
  SharedMapping map_;
  std::vector<char> prepared_;
};

}  // namespace shm
}  // namespace xccl
