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
#include <vector>

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

// Binomial tree towards the root (v = my distance from the root in rank order): v folds in
// its children v + 1, v + 2, v + 4, ... (powers of two below lowbit(v); the root: below n)
// one after the other, then sends the partial to v - lowbit(v). The fold order is fixed by
// n and the root, so repeated calls give the same bits. Partials alternate between two
// scratch halves (a fold reads one and writes the other); the root's last fold writes
// recvbuf.
void treeRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks();
  const int v = mod(ex.rank() - args.root, n);
  const size_t bytes = args.count * dtypeSize(args.dtype);
  auto rankOf = [&](int w) { return (w + args.root) % n; };
  int low = 1;  // lowbit(v), or the first power of two >= n for the root
  while (low < n && !(v & low)) low *= 2;
  std::vector<int> children;
  for (int m = 1; m < low && v + m < n; m *= 2) children.push_back(v + m);
  DeviceBuffer scratch(ex, children.empty() ? 0 : 2 * bytes);
  const void* partial = args.sendbuf;
  for (size_t i = 0; i < children.size(); ++i) {
    void* dst = v == 0 && i + 1 == children.size() ? args.recvbuf : scratch.get() + (i % 2) * bytes;
    ex.recvReduce(rankOf(children[i]), dst, partial, args.count, args.dtype, args.op);
    ex.wait();
    partial = dst;
  }
  if (v != 0) {
    ex.send(rankOf(v - low), partial, bytes);
    ex.wait();
  } else if (partial != args.recvbuf) {  // a root without children (n == 1)
    ex.device().copy(args.recvbuf, partial, bytes, CopyKind::kDeviceToDevice);
  }
}

bool chainSupports(const CollArgs&, const Exchange&) { return true; }

bool treeSupports(const CollArgs& args, const Exchange& ex) {
  return directTempFits(ex, args.count * dtypeSize(args.dtype), 2);
}

// Declines when the root's temporary (one buffer per rank) would be too large.
bool directSupports(const CollArgs& args, const Exchange& ex) {
  return directTempFits(ex, args.count * dtypeSize(args.dtype), ex.nranks());
}

}  // namespace

std::vector<Algorithm> reduceAlgorithms() {
  return {{"chain", CollType::kReduce, chainSupports, chainRun},
          {"direct", CollType::kReduce, directSupports, directRun, /*hearsRingPrev=*/false,
           /*ordered=*/true},
          {"tree", CollType::kReduce, treeSupports, treeRun}};
}

}  // namespace algo
}  // namespace xccl
