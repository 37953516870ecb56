// Broadcast schedules.
//
// "chain" (large messages): the ranks in ring order starting at root form a chain
// root = link 0 -> link 1 -> ... -> link n-1. The buffer is cut into chunks of
// XCCL_CHAIN_CHUNK bytes and pipelined: a middle link receives chunk j from its prev while
// it forwards the slices of chunk j-1 (and of j itself, as they land) to its next.
//
//   step:      0        1        2        3 ...
//   root:    send c0..c(k-1) (all posted at once, the transport paces them)
//   link 1:  recv c0  recv c1  recv c2  recv c3      (+ send c0, c1, c2 to link 2)
//   link 2:           recv c0  recv c1  recv c2 ...  (+ forward)
//   last:    recv c0..c(k-1) (all posted at once, nothing to forward)
//
// Every link receives into recvbuf and forwards from recvbuf; the root sends from sendbuf
// and copies it into its own recvbuf (skipped in-place).
//
// "direct" (small messages): one step, the root sends the whole buffer to every rank.
#include <algorithm>

#include "schedule.h"

namespace xccl {
namespace algo {

namespace {

void chainRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks();
  const int link = mod(ex.ringPos(ex.rank()) - ex.ringPos(args.root), n);
  const size_t elemSize = dtypeSize(args.dtype);
  // Calls fn(byte offset, bytes) for every chunk.
  auto eachChunk = [&](auto&& fn) {
    forEachPiece(args.count, elemSize, ex.tuning().chainChunk,
                 [&](size_t first, size_t elems) { fn(first * elemSize, elems * elemSize); });
  };
  if (link == 0) {
    eachChunk(
        [&](size_t off, size_t bytes) { ex.send(ex.ringNext(), at(args.sendbuf, off), bytes); });
    if (args.recvbuf != args.sendbuf) {
      ex.device().copy(args.recvbuf, args.sendbuf, args.count * elemSize,
                       CopyKind::kDeviceToDevice);
    }
  } else if (link == n - 1) {
    eachChunk(
        [&](size_t off, size_t bytes) { ex.recv(ex.ringPrev(), at(args.recvbuf, off), bytes); });
  } else {
    // Every chunk is posted at once and forwarded as it lands (Exchange::sendForward).
    eachChunk([&](size_t off, size_t bytes) {
      ex.sendForward(ex.ringNext(), ex.recv(ex.ringPrev(), at(args.recvbuf, off), bytes));
    });
  }
  ex.wait();
}

void directRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t bytes = args.count * dtypeSize(args.dtype);
  if (me == args.root) {
    for (int peer = 0; peer < n; ++peer) {
      if (peer != me) ex.send(peer, args.sendbuf, bytes);
    }
    if (args.recvbuf != args.sendbuf) {
      ex.device().copy(args.recvbuf, args.sendbuf, bytes, CopyKind::kDeviceToDevice);
    }
  } else {
    ex.recv(args.root, args.recvbuf, bytes);
  }
  ex.wait();
}

// Binomial tree from the root (v = my distance from the root in rank order): v receives from
// v - lowbit(v) and forwards to v + m for every power of two m < lowbit(v) (the root: every
// m < n), as the data lands. ceil(log2 n) hops where direct has the root send n-1 messages.
void treeRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks();
  const int v = mod(ex.rank() - args.root, n);
  const size_t bytes = args.count * dtypeSize(args.dtype);
  auto rankOf = [&](int w) { return (w + args.root) % n; };
  int mask = 1;
  MsgRef landed;
  for (; mask < n; mask *= 2) {
    if (v & mask) {
      landed = ex.recv(rankOf(v - mask), args.recvbuf, bytes);
      break;
    }
  }
  for (int m = mask / 2; m > 0; m /= 2) {
    if (v + m >= n) continue;
    if (v == 0) {
      ex.send(rankOf(v + m), args.sendbuf, bytes);
    } else {
      ex.sendForward(rankOf(v + m), landed);
    }
  }
  if (v == 0 && args.recvbuf != args.sendbuf) {
    ex.device().copy(args.recvbuf, args.sendbuf, bytes, CopyKind::kDeviceToDevice);
  }
  ex.wait();
}

bool always(const CollArgs&, const Exchange&) { return true; }

}  // namespace

std::vector<Algorithm> broadcastAlgorithms() {
  return {{"chain", CollType::kBroadcast, always, chainRun},
          {"direct", CollType::kBroadcast, always, directRun},
          {"tree", CollType::kBroadcast, always, treeRun}};
}

}  // namespace algo
}  // namespace xccl
