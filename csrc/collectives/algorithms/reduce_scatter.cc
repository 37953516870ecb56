// ReduceScatter schedules. sendbuf holds nranks blocks of count elements; rank r ends with
// block r reduced over all ranks. In-place means recvbuf == sendbuf + rank * block bytes.
//
// "ring" (large messages): n-1 steps along the ring. With p = my ring position and
// block(q) = the block of rank ring[q]:
//
//   step s = 0..n-2:  send partial block(p-1-s) to next,
//                     recvReduce partial block(p-2-s) from prev (local = my sendbuf block)
//
// The partial I send at step s is the one I reduced at step s-1 (step 0 sends my plain
// input), so block(q) starts at position q+1 and is complete when it reaches position q
// at the last step, s = n-2, where it is reduced straight into recvbuf. Partials of the
// steps before live in temporary slots (slot s, n-2 blocks), so sendbuf is never written.
// All steps are posted at once and each partial is forwarded slice by slice as it is
// reduced (Exchange::sendForward), so the steps overlap.
//
//        pos0              pos1              pos2           (n = 3)
//   s0:  b2 -> pos1        b0 -> pos2        b1 -> pos0     rr = recvReduce
//        rr b1 into slot0  rr b2 into slot0  rr b0 into slot0
//   s1:  slot0 (b1)->pos1  slot0 (b2)->pos2  slot0 (b0)->pos0   (as slot0 fills)
//        rr b0 -> recvbuf  rr b1 -> recvbuf  rr b2 -> recvbuf
//
// "direct" (small messages): one step, I send block j of sendbuf to rank j and receive
// block "me" from every rank into a temporary, then fold them in rank order into recvbuf.
//
// ReduceScatterv, "pairwise": block p of sendbuf is recvcounts[p] elements at sdispls[p].
// My block is copied into recvbuf, then step s = 1..n-1 sends block (me+s) to its rank and
// reduces rank (me-s)'s copy of my block into recvbuf, one step at a time (each step's
// reduction reads what the step before wrote). In-place means recvbuf == sendbuf +
// sdispls[rank] elements: my block of sendbuf is the only one written, and it is never sent.
#include "schedule.h"

namespace xccl {
namespace algo {

namespace {

void ringRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), p = ex.ringPos(ex.rank());
  const size_t blockBytes = args.count * dtypeSize(args.dtype);
  const auto& ring = ex.ring();
  DeviceBuffer slots(ex, n > 2 ? (n - 2) * blockBytes : 0);
  ex.send(ex.ringNext(), at(args.sendbuf, ring[mod(p - 1, n)] * blockBytes), blockBytes);
  for (int s = 0; s < n - 1; ++s) {
    const int recvRank = ring[mod(p - 2 - s, n)];
    void* dst = s == n - 2 ? args.recvbuf : slots.get() + s * blockBytes;
    MsgRef partial = ex.recvReduce(ex.ringPrev(), dst, at(args.sendbuf, recvRank * blockBytes),
                                   args.count, args.dtype, args.op);
    if (s < n - 2) ex.sendForward(ex.ringNext(), partial);
  }
  ex.wait();
}

void directRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t blockBytes = args.count * dtypeSize(args.dtype);
  const void* mine = at(args.sendbuf, me * blockBytes);
  FoldInputs in(ex, n, me, mine, args.recvbuf, blockBytes);
  for (int i = 1; i < n; ++i) {
    int peer = (me + i) % n;
    ex.send(peer, at(args.sendbuf, peer * blockBytes), blockBytes);
  }
  for (int i = 1; i < n; ++i) {
    int peer = (me + n - i) % n;
    ex.recv(peer, in.slot(peer), blockBytes);
  }
  ex.wait();
  in.fold(args.recvbuf, args.count, args.dtype, args.op);
}

void pairwiseVRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t es = dtypeSize(args.dtype);
  const char* mine = at(args.sendbuf, args.sdispls[me] * es);
  if (mine != args.recvbuf) {
    ex.device().copy(args.recvbuf, mine, args.recvcounts[me] * es, CopyKind::kDeviceToDevice);
  }
  for (int s = 1; s < n; ++s) {
    const int to = (me + s) % n, from = (me - s + n) % n;
    ex.send(to, at(args.sendbuf, args.sdispls[to] * es), args.recvcounts[to] * es);
    ex.recvReduce(from, args.recvbuf, args.recvbuf, args.recvcounts[me], args.dtype, args.op);
    ex.wait();
  }
}

bool ringSupports(const CollArgs&, const Exchange&) { return true; }

// Declines when the temporary (one block per rank) would be too large.
bool directSupports(const CollArgs& args, const Exchange& ex) {
  return directTempFits(ex, args.count * dtypeSize(args.dtype), ex.nranks());
}

}  // namespace

std::vector<Algorithm> reduceScatterAlgorithms() {
  return {{"ring", CollType::kReduceScatter, ringSupports, ringRun},
          {"direct", CollType::kReduceScatter, directSupports, directRun, /*hearsRingPrev=*/false,
           /*ordered=*/true},
          {"pairwise", CollType::kReduceScatterv, ringSupports, pairwiseVRun}};
}

}  // namespace algo
}  // namespace xccl
