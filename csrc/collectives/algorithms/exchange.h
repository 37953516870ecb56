// Exchange: the progress engine algorithms are written against.
//
// An algorithm posts messages (send / recv / recvReduce to or from peers) and calls
// wait(), which progresses everything posted until done, concurrently across peers and
// directions, honouring the operation's deadline and the communicator's abort flag.
// Messages between two ranks in one direction match in posting order.
//
// Framing (done here, not in the transports): every message is a 32-byte header
// {magic, op type, flags, sequence, payload bytes, check} followed by the payload padded
// to a multiple of 32 bytes, so a header never straddles a ring's end (rings are multiples
// of 64 bytes) and a window never splits an element. The receiver checks magic, kind (collective /
// point-to-point), sequence and length against what it posted: a mismatch means the ranks disagree
// on the operation or its count, and fails the operation with both sides' values in the message,
// never reading past the posted buffer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "../transport/transport.h"
#include "xccl.h"

namespace xccl {

class Device;

enum class CollType : uint16_t {
  kAllReduce = 1,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kAllToAllv,
  kGather,
  kScatter,
  kSend,
  kRecv,
  kRecvAny,
  kBarrier,
};
const char* collName(CollType type);

// Everything an algorithm may know about one call.
struct CollArgs {
  CollType type = CollType::kAllReduce;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;  // elements; per-rank block for allgather/reducescatter/alltoall/gather/scatter
  xcclDataType_t dtype = xcclFloat32;
  xcclRedOp_t op = xcclSum;
  int root = 0;  // broadcast/reduce/gather/scatter root; peer for send/recv
  std::vector<size_t> sendcounts, sdispls, recvcounts, rdispls;  // alltoallv, in elements
  unsigned char scalar[8] = {0};  // premul-sum factor, a value of dtype
  int* anyPeerOut = nullptr;      // recv-any: where the sender's rank goes
};

struct PendingMsg;  // defined in exchange.cc
// A posted receive, for sendForward(). Valid until the wait() that completes it returns.
using MsgRef = std::shared_ptr<PendingMsg>;

class Exchange {
 public:
  Exchange(int rank, int nranks, Device& device, std::vector<Connection*> conns,
           std::vector<int> ringOrder, const std::atomic<bool>& abortFlag);
  ~Exchange();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  Device& device() { return device_; }
  // Ranks in ring order (ranks grouped by host); ringNext/ringPrev are neighbours of `rank`.
  const std::vector<int>& ring() const { return ring_; }
  int ringPos(int rank) const { return ringPos_[rank]; }
  int ringNext() const { return ring_[(ringPos_[rank_] + 1) % nranks_]; }
  int ringPrev() const { return ring_[(ringPos_[rank_] + nranks_ - 1) % nranks_]; }

  // Called by the communicator before each operation. streamingStores: the operation's
  // output is too large to stay in cache, so receives that nothing forwards are written
  // with CopyKind::kStagingToDeviceNoReuse.
  void beginOp(CollType type, uint64_t collSeq, const Deadline& deadline,
               bool streamingStores = false);

  // Posts a message of `bytes` bytes from device buffer src to peer.
  void send(int peer, const void* src, size_t bytes);
  // Posts receipt of a message of exactly `bytes` bytes from peer into device buffer dst.
  MsgRef recv(int peer, void* dst, size_t bytes);
  // Posts receipt that reduces: dst[i] = local[i] (op) incoming[i]. local may equal dst.
  MsgRef recvReduce(int peer, void* dst, const void* local, size_t count, xcclDataType_t dtype,
                    xcclRedOp_t op);
  // Posts a send of what `source` (a posted recv/recvReduce) writes into its dst, slice by
  // slice as it lands: a ring or chain forwards data while it is still in cache, and a whole
  // multi-step schedule can be posted at once and completed by a single wait().
  void sendForward(int peer, const MsgRef& source);
  // Posts receipt of a point-to-point message from any peer; *peerOut gets the sender.
  void recvAny(void* dst, size_t bytes, int* peerOut);
  // Progresses all posted messages until every one is complete. Throws Timeout,
  // RemoteError (peer gone, bad frame, mismatch) or InvalidUsage (abort).
  void wait();

 private:
  bool progressSend(int peer);
  bool progressRecv(int peer);
  bool progressRecvAny();
  void checkPeers();
  [[noreturn]] void failTimeout();

  int rank_, nranks_;
  Device& device_;
  std::vector<Connection*> conns_;
  std::vector<int> ring_, ringPos_;
  const std::atomic<bool>& abort_;
  CollType type_ = CollType::kAllReduce;
  uint64_t collSeq_ = 0;
  Deadline deadline_;
  std::vector<std::deque<MsgRef>> sends_, recvs_;
  MsgRef recvAny_;
  std::vector<uint64_t> p2pSent_, p2pRecvd_;  // per-peer point-to-point message counters
  // Peers whose connection may still hold bytes we committed (set when a send completes,
  // cleared once sendPending() says no), so idle connections are not polled.
  std::vector<char> mayHoldBytes_;
  size_t pending_ = 0;
  size_t sliceBytes_;
  bool streamingStores_ = false;
  int anyStart_ = 0;
};

}  // namespace xccl
