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
  // Calls fn(first element, elements) for every chunk.
  auto eachChunk = [&](auto&& fn) {
    forEachPiece(args.count, elemSize, ex.tuning().chainChunk, fn);
  };
  if (link == n - 1) {
    eachChunk([&](size_t first, size_t elems) {
      ex.send(ex.ringPrev(), at(args.sendbuf, first * elemSize), elems * elemSize);
    });
  } else if (link == 0) {
    eachChunk([&](size_t first, size_t elems) {
      const size_t off = first * elemSize;
      ex.recvReduce(ex.ringNext(), at(args.recvbuf, off), at(args.sendbuf, off), elems, args.dtype,
                    args.op);
    });
  } else {
    // Every chunk is posted at once; its partial lands in a temporary the size of the
    // buffer and is forwarded toward the root as it is reduced (Exchange::sendForward).
    DeviceBuffer partials(ex, args.count * elemSize);
    eachChunk([&](size_t first, size_t elems) {
      const size_t off = first * elemSize;
      ex.sendForward(ex.ringPrev(),
                     ex.recvReduce(ex.ringNext(), partials.get() + off, at(args.sendbuf, off),
                                   elems, args.dtype, args.op));
    });
    ex.wait();  // before partials goes out of scope
    return;
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
  FoldInputs in(ex, n, me, args.sendbuf, args.recvbuf, bytes);
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) ex.recv(peer, in.slot(peer), bytes);
  }
  ex.wait();
  in.fold(args.recvbuf, args.count, args.dtype, args.op);
}

bool chainSupports(const CollArgs&, const Exchange&) { return true; }

// Declines when the root's temporary (one buffer per rank) would be too large.
bool directSupports(const CollArgs& args, const Exchange& ex) {
  return directTempFits(ex, args.count * dtypeSize(args.dtype), ex.nranks());
}

}  // namespace

std::vector<Algorithm> reduceAlgorithms() {
  return {{"chain", CollType::kReduce, chainSupports, chainRun},
          {"direct", CollType::kReduce, directSupports, directRun}};
}

}  // namespace algo
}  // namespace xccl
