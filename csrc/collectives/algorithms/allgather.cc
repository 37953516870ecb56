// AllGather schedules. recvbuf holds nranks blocks of count elements, rank-major; in-place
// means sendbuf == recvbuf + rank * block bytes (my block is already where it belongs).
//
// "ring" (large messages): my own block is copied into place, then n-1 steps along the ring.
// With p = my ring position and block(q) = the block of rank ring[q]:
//
//   step s = 0..n-2:  send block(p-s) to next, recv block(p-1-s) from prev
//   (all steps posted at once; a received block is forwarded slice by slice as it lands)
//
//        pos0        pos1        pos2
//   s0:  b0 -> pos1  b1 -> pos2  b2 -> pos0      each block travels n-1 hops; what I
//   s1:  b2 -> pos1  b0 -> pos2  b1 -> pos0      receive at step s I forward at step s+1
//
// "direct" (small messages): one step, I send my block to every rank and receive every
// rank's block straight into its place in recvbuf.
//
// AllGatherv, "pairwise": as direct, with blocks of each rank's own size (recvcounts[i]
// elements at rdispls[i]); this rank's block is sendbuf (count elements). In-place means
// sendbuf == recvbuf + rdispls[rank] elements. Zero-sized blocks still travel (as empty
// messages), so ranks that disagree on a size fail instead of hanging.
#include "schedule.h"

namespace xccl {
namespace algo {

namespace {

void copyOwnBlock(Exchange& ex, const CollArgs& args, size_t blockBytes) {
  char* mine = at(args.recvbuf, ex.rank() * blockBytes);
  if (mine != args.sendbuf) {
    ex.device().copy(mine, args.sendbuf, blockBytes, CopyKind::kDeviceToDevice);
  }
}

// All steps are posted before one wait(): step 0 sends my block from sendbuf, and every
// later step forwards the block of the step before as it lands (Exchange::sendForward).
void ringRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), p = ex.ringPos(ex.rank());
  const size_t blockBytes = args.count * dtypeSize(args.dtype);
  const auto& ring = ex.ring();
  ex.send(ex.ringNext(), args.sendbuf, blockBytes);
  for (int s = 0; s < n - 1; ++s) {
    const int recvRank = ring[mod(p - 1 - s, n)];
    MsgRef landed = ex.recv(ex.ringPrev(), at(args.recvbuf, recvRank * blockBytes), blockBytes);
    if (s < n - 2) ex.sendForward(ex.ringNext(), landed);
  }
  copyOwnBlock(ex, args, blockBytes);
  ex.wait();
}

void directRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t blockBytes = args.count * dtypeSize(args.dtype);
  copyOwnBlock(ex, args, blockBytes);
  for (int i = 1; i < n; ++i) ex.send((me + i) % n, args.sendbuf, blockBytes);
  for (int i = 1; i < n; ++i) {
    int peer = (me + n - i) % n;
    ex.recv(peer, at(args.recvbuf, peer * blockBytes), blockBytes);
  }
  ex.wait();
}

bool always(const CollArgs&, const Exchange&) { return true; }

void pairwiseVRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t es = dtypeSize(args.dtype);
  char* mine = at(args.recvbuf, args.rdispls[me] * es);
  if (mine != args.sendbuf) {
    ex.device().copy(mine, args.sendbuf, args.count * es, CopyKind::kDeviceToDevice);
  }
  for (int s = 1; s < n; ++s) {
    const int to = (me + s) % n, from = (me - s + n) % n;
    ex.send(to, args.sendbuf, args.count * es);
    ex.recv(from, at(args.recvbuf, args.rdispls[from] * es), args.recvcounts[from] * es);
  }
  ex.wait();
}

}  // namespace

std::vector<Algorithm> allgatherAlgorithms() {
  // Both receive from prev (ring: n-1 blocks; direct: every rank's block) when count > 0.
  return {{"ring", CollType::kAllGather, always, ringRun, /*hearsRingPrev=*/true},
          {"direct", CollType::kAllGather, always, directRun, /*hearsRingPrev=*/true},
          {"pairwise", CollType::kAllGatherv, always, pairwiseVRun}};
}

}  // namespace algo
}  // namespace xccl
