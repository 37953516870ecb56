// The layout of one shared-memory ring (one direction of one pair), shared by the eagerly
// created rings (connection.cc) and the arena's (arena.cc), and the segment that maps one.
//
//   segment: [ header page: magic, version, sizes, secret proof, closed[2], head, tail,
//              laneHead, laneTail, beat, readsDone, note ] [ ring bytes (XCCL_SHM_BUFFSIZE) ]
//
// Internal to the shared-memory transport.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "collectives/device/device.h"
#include "collectives/transport/transport.h"
#include "common/auth.h"
#include "common/error.h"
#include "common/shared_memory.h"
#include "doorbell.h"

namespace xccl {
namespace shm {

constexpr uint64_t kMagic = 0x58434c4c53484d31ull;  // "XCLLSHM1"
constexpr uint32_t kVersion = 4;       // 3: a proof of the secret instead of it; 4: heartbeats
constexpr size_t kHeaderBytes = 4096;  // the ring starts page-aligned
constexpr size_t kMaxRing = size_t(1) << 30;
constexpr size_t kMaxHandle = 256;
constexpr size_t kMaxNote = 1024;
enum Side { kCreator = 0, kOpener = 1 };

static_assert(std::atomic<uint64_t>::is_always_lock_free, "ring counters must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "closed flags must be lock-free");

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t pad0;
  uint64_t ringBytes;
  uint64_t laneBytes;  // 0: no payload lane
  int32_t creatorPid, creatorRank, openerRank, pad;
  // The creator's proof that it knows the communicator's secret (common/auth.h) over a
  // fresh nonce and the ring's identity; the secret itself is never in shared memory.
  unsigned char nonce[auth::kNonceBytes];
  unsigned char proof[auth::kProofBytes];
  alignas(64) std::atomic<uint32_t> closed[2];  // indexed by Side
  alignas(64) std::atomic<uint64_t> head;       // written by the producer (creator)
  alignas(64) std::atomic<uint64_t> tail;       // written by the consumer (opener)
  alignas(64) std::atomic<uint64_t> laneHead;   // the payload lane's, likewise
  alignas(64) std::atomic<uint64_t> laneTail;
  alignas(64) std::atomic<uint64_t> beat;       // bumped by the creator's heartbeat thread
  alignas(64) std::atomic<uint64_t> readsDone;  // the creator's peer-read messages the opener read
  // The creator's reason for failing (Connection::leaveNote), written once before closed.
  alignas(64) std::atomic<uint32_t> noteBytes;
  char note[kMaxNote];
};
static_assert(sizeof(Header) <= kHeaderBytes, "header must fit its page");

// What a ring's proof is bound to: its creator and opener, and its size.
inline std::string ringContext(const Header& h) {
  return strCat("xccl-shm pid ", h.creatorPid, " rank ", h.creatorRank, "->", h.openerRank, " ",
                h.ringBytes);
}

// One mapped memfd, and the payload lane when there is one (device memory: owned when this
// process created it, mapped from the peer otherwise).
// A view (owned = false) is a slot of this rank's arena (arena.h), which the arena unmaps.
class Segment {
 public:
  explicit Segment(SharedMapping m, bool owned = true) : map_(m), owned_(owned) {}
  ~Segment() {
    if (lane_ != nullptr) device_->closeShared(lane_, header()->laneBytes, laneOwner_);
    if (owned_) closeSharedMapping(map_);
  }
  Header* header() const { return static_cast<Header*>(map_.base); }
  char* ring() const { return static_cast<char*>(map_.base) + kHeaderBytes; }
  size_t ringBytes() const { return map_.bytes - kHeaderBytes; }
  int fd() const { return map_.fd; }
  bool owned() const { return owned_; }
  size_t mappedBytes() const { return map_.bytes; }
  char* lane() const { return static_cast<char*>(lane_); }
  void setLane(void* lane, Device* device, bool owner) {
    lane_ = lane;
    device_ = device;
    laneOwner_ = owner;
  }

 private:
  SharedMapping map_;
  bool owned_;
  void* lane_ = nullptr;
  Device* device_ = nullptr;
  bool laneOwner_ = false;
};

// Bytes of each ring (XCCL_SHM_BUFFSIZE, checked).
size_t ringBytesKnob();
// Writes a fresh header for the ring rank -> peer at h (zeroed memory) and proves the secret.
void initHeader(Header* h, int rank, int peer, size_t ringBytes, const std::string& secret);
// Checks a peer's ring header (magic, identities, sizes, the proof of the secret); throws
// RemoteError naming the peer when it is not the ring that peer made for us.
void checkHeader(const Header& h, int rank, int peer, long pid, size_t ringBytes,
                 uint64_t laneBytes, const std::string& secret);

// Whether rings of `device` carry payload lanes (XCCL_SHM_LANE; such rings are made eagerly).
bool laneWanted(Device& device);
// The connection over two mapped rings (ours to send on, the peer's to receive from).
std::unique_ptr<Connection> makeShmConnection(int rank, int peer, int peerPid,
                                              std::unique_ptr<Segment> send,
                                              std::unique_ptr<Segment> recv, Device& device,
                                              std::unique_ptr<Doorbell> peerBell);

}  // namespace shm
}  // namespace xccl
