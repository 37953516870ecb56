// Shared-memory transport: one single-producer/single-consumer byte ring per direction.
//
// Each rank creates the ring it *sends* on, in an anonymous memfd (common/shared_memory.h),
// and publishes "pid fd ringBytes [laneBytes laneHandle]" through the store; the peer opens
// /proc/<pid>/fd/<fd> and maps it.
//
//   segment: [ header page: magic, version, sizes, secret, closed[2], head, tail,
//              laneHead, laneTail ] [ ring bytes (XCCL_SHM_BUFFSIZE) ]
//   head = bytes ever written (producer only), tail = bytes ever consumed (consumer only),
//   each on its own cache line; release on publish, acquire on observe.
//
// Payload lane: when the device prefers it (CUDA) or XCCL_SHM_LANE=1, the sender also
// allocates a payload ring in shareable device memory (Device::allocShared: CUDA IPC, or a
// memfd for host memory) and payload bytes travel there, device to device; the byte ring
// then carries only frame headers. The lane's counters live in the header page.
#pragma once

#include <memory>
#include <string>

#include "collectives/transport/transport.h"
#include "doorbell.h"

namespace xccl {

class Device;

namespace shm {

class Segment;

// The outgoing ring towards `peer`, created by this rank. describe() is what the peer
// needs to open it ("<pid> <fd>").
class OutgoingRing {
 public:
  OutgoingRing(int rank, int peer, const std::string& secret, Device& device);
  ~OutgoingRing();
  std::string describe() const;
  std::unique_ptr<Segment> take();

 private:
  std::unique_ptr<Segment> seg_;
  std::string laneHandle_;
};

// Opens the peer's ring (from its describe() string), checks it, and pairs it with our
// outgoing ring into a Connection. Throws RemoteError on a bad secret/header, IoError
// when the segment cannot be opened.
// peerBell: the peer's doorbell, rung after every move of a ring counter (doorbell.h).
std::unique_ptr<Connection> makeConnection(int rank, int peer, int peerPid, OutgoingRing& out,
                                           const std::string& peerDesc, const std::string& secret,
                                           Device& device, std::unique_ptr<Doorbell> peerBell);

}  // namespace shm
}  // namespace xccl
