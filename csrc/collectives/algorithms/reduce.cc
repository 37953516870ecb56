// Reduce schedules. recvbuf is only significant at the root; other ranks never write it.
//
// "chain" (large messages): the ranks in ring order starting at root form a chain
// root = link 0 <- link 1 <- ... <- link n-1, partial results flowing toward the root. The
// buffer is cut into chunks of XCCL_CHAIN_CHUNK bytes and pipelined: a middle link, at step
// j, recvReduces chunk j from its next (local operand: its sendbuf chunk j) into one of two
// temporary chunk slots while it forwards chunk j-1 (reduced at step j-1) to its prev.
//
//   step:      0           1           2 ...
//   last:    send c0..c(k-1) from sendbuf (all posted at once)
//   link i:  rr c0->s0   rr c1->s1   rr c2->s0 ...     (rr = recvReduce, s = slot)
//                        send s0     send s1   ...     to link i-1
//   root:    rr c0..c(k-1) straight into recvbuf (all posted at once)
//
// "direct" (small messages): one step, every rank sends its sendbuf to the root, which
// receives them into a temporary and folds them in rank order into recvbuf.
#include <algorithm>

#include "schedule.h"

namespace xccl {
namespace algo {

namespace {

void chainRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks();
  const int link = mod(ex.ringPos(ex.rank()) - ex.ringPos(args.root), n);
  const size_t elemSize = dtypeSize(args.dtype);
  const size_t chunkBytes = chainChunkBytes();
  const size_t nchunks = pieceCount(args.count, elemSize, chunkBytes);
  const size_t chunkElems = std::max<size_t>(1, chunkBytes / elemSize);
  auto chunkFirst = [&](size_t j) { return j * chunkElems; };
  auto chunkCount = [&](size_t j) { return std::min(chunkElems, args.count - j * chunkElems); };

  if (link == n - 1) {
    for (size_t j = 0; j < nchunks; ++j) {
      ex.send(ex.ringPrev(), at(args.sendbuf, chunkFirst(j) * elemSize),
              chunkCount(j) * elemSize);
    }
    ex.wait();
    return;
  }
  if (link == 0) {
    for (size_t j = 0; j < nchunks; ++j) {
      size_t offset = chunkFirst(j) * elemSize;
      ex.recvReduce(ex.ringNext(), at(args.recvbuf, offset), at(args.sendbuf, offset),
                    chunkCount(j), args.dtype, args.op);
    }
    ex.wait();
    return;
  }
  const size_t slotBytes = std::min(chunkElems, args.count) * elemSize;
  DeviceBuffer slots(ex.device(), 2 * slotBytes);
  auto slot = [&](size_t j) { return slots.get() + (j % 2) * slotBytes; };
  for (size_t j = 0; j <= nchunks; ++j) {
    if (j < nchunks) {
      ex.recvReduce(ex.ringNext(), slot(j), at(args.sendbuf, chunkFirst(j) * elemSize),
                    chunkCount(j), args.dtype, args.op);
    }
    if (j > 0) ex.send(ex.ringPrev(), slot(j - 1), chunkCount(j - 1) * elemSize);
    ex.wait();
  }
}

void directRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t bytes = args.count * dtypeSize(args.dtype);
  if (me != args.root) {
    ex.send(args.root, args.sendbuf, bytes);
    ex.wait();
    return;
  }
  FoldInputs in(ex.device(), n, me, args.sendbuf, args.recvbuf, bytes);
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) ex.recv(peer, in.slot(peer), bytes);
  }
  ex.wait();
  in.fold(args.recvbuf, args.count, args.dtype, args.op);
}

bool chainSupports(const CollArgs&, const Exchange&) { return true; }

// Declines when the root's temporary (one buffer per rank) would be too large.
bool directSupports(const CollArgs& args, const Exchange& ex) {
  return directTempFits(args.count * dtypeSize(args.dtype), ex.nranks());
}

}  // namespace

std::vector<Algorithm> reduceAlgorithms() {
  return {{"chain", CollType::kReduce, chainSupports, chainRun},
          {"direct", CollType::kReduce, directSupports, directRun}};
}

}  // namespace algo
}  // namespace xccl
