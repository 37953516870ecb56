// Shared-memory transport: one single-producer/single-consumer byte ring per direction.
//
// Each rank creates the ring it *sends* on, in an anonymous memfd (no name in /dev/shm,
// freed by the kernel when the last fd and mapping go, even after a crash), and
// publishes "pid fd" through the store; the peer opens /proc/<pid>/fd/<fd> and maps it.
//
//   segment: [ header page: magic, version, ring size, secret, closed[2], head, tail ]
//            [ ring bytes (XCCL_SHM_BUFFSIZE) ]
//   head = bytes ever written (producer only), tail = bytes ever consumed (consumer only),
//   each on its own cache line; release on publish, acquire on observe.
#pragma once

#include <memory>
#include <string>

#include "../transport.h"

namespace xccl {

class Device;

namespace shm {

class Segment;

// The outgoing ring towards `peer`, created by this rank. describe() is what the peer
// needs to open it ("<pid> <fd>").
class OutgoingRing {
 public:
  OutgoingRing(int rank, int peer, const std::string& secret);
  ~OutgoingRing();
  std::string describe() const;
  std::unique_ptr<Segment> take();

 private:
  std::unique_ptr<Segment> seg_;
};

// Opens the peer's ring (from its describe() string), checks it, and pairs it with our
// outgoing ring into a Connection. Throws RemoteError on a bad secret/header, IoError
// when the segment cannot be opened.
std::unique_ptr<Connection> makeConnection(int rank, int peer, int peerPid, OutgoingRing& out,
                                           const std::string& peerDesc, const std::string& secret,
                                           Device& device);

}  // namespace shm
}  // namespace xccl
