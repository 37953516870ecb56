// Reduce schedules. recvbuf is only significant at the root; other ranks never write it.
//
// "chain" (large messages): the ranks in ring order starting at root form a chain
// root = link 0 <- link 1 <- ... <- link n-1, partial results flowing toward the root. The
// buffer is cut into chunks of XCCL_CHAIN_CHUNK bytes and pipelined: a middle link
// recvReduces chunk j from its next (local operand: its sendbuf chunk j) into a temporary
// and forwards it to its prev slice by slice as it is reduced, all chunks posted at once.
//
//   step:      0           1           2 ...
//   last:    send c0..c(k-1) from sendbuf (all posted at once)
//   link i:  rr c0->t0   rr c1->t1   rr c2->t2 ...     (rr = recvReduce, t = temporary)
//              send t0 (as it fills) send t1 ...      to link i-1
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
  // Every chunk is posted at once; its partial lands in a temporary the size of the buffer
  // and is forwarded toward the root as it is reduced (Exchange::sendForward).
  DeviceBuffer partials(ex.device(), args.count * elemSize);
  for (size_t j = 0; j < nchunks; ++j) {
    const size_t offset = chunkFirst(j) * elemSize;
    ex.sendForward(ex.ringPrev(),
                   ex.recvReduce(ex.ringNext(), partials.get() + offset,
                                 at(args.sendbuf, offset), chunkCount(j), args.dtype, args.op));
  }
  ex.wait();
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
