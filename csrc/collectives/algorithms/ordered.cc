// "ordered": the reductions whose every element is the left fold of the ranks' inputs in rank
// order, ((in0 op in1) op in2) ..., whatever the size, the transports or where the ranks
// live: what XCCL_REPRODUCIBLE=1 selects among (with the "direct" algorithms, which fold in
// rank order too, for the sizes their temporaries hold). Docs: ALGORITHMS.md, "Determinism".
//
// allreduce: the buffer is cut into n blocks, block j owned by rank j.
//   1. every rank sends its block j to rank j; each owner folds the n copies of its block
//      in rank order (its own read in place) into its block of recvbuf;
//   2. every owner sends its folded block to every other rank.
//   Each rank sends (n-1)/n of the buffer in each phase, as a ring does. The fold reduces
//   each copy straight out of the transport as it lands, in rank order (foldRound), and
//   phase 2 forwards the folded block slice by slice as its last step lands. Blocks above
//   XCCL_DIRECT_TEMP_MAX bytes are done in rounds (the fold is element-wise, so rounds
//   change no bit).
// reduce: phase 1 as allreduce's; in phase 2 the owners send their blocks to the root only
//   (non-root owners fold into a temporary: recvbuf is the root's).
// reducescatter(v): rank j's block of every sendbuf goes to rank j, which folds the n copies
//   in rank order into recvbuf, in rounds of at most XCCL_DIRECT_TEMP_MAX bytes.
// "foldchain" (allreduce, many ranks): the same fold as a pipeline between neighbours in rank
//   order (chainAllreduceRun below).
// Zero-length pieces are neither sent nor received (both sides skip them alike).
#include <algorithm>
#include <vector>

#include "collectives/device/dtype.h"
#include "schedule.h"

namespace xccl {
namespace algo {

namespace {

// Elements of one owner's piece per round: the fold needs no temporary (each step reduces
// out of the transport), but an in-place owner keeps a copy of its own piece and a non-root
// owner of a reduce folds into one, so a piece is at most XCCL_DIRECT_TEMP_MAX bytes (at
// least one element); one round up to that. Rounds wait for each other, so more of them
// only cost.
size_t pieceElems(const Exchange& ex, size_t elemSize) {
  return std::max<size_t>(1, static_cast<size_t>(ex.tuning().directTempMax) / elemSize);
}

// One round: sendPiece(peer) is where my copy of `peer`'s piece starts, elems[r] the
// elements of rank r's piece; my copy of my own piece is at `mine`. The n copies of my piece
// are folded into dst in rank order, exactly as FoldInputs::fold computes it
// (reduce(a = in0, b = in1), then reduce(a = acc, b = in_r) for r = 2, 3, ...), but as they
// land: each step is one receive that reduces straight out of the transport (no temporary),
// posted once the step before it is complete (wait's `more`), while the later ranks' pieces
// already flow into their rings. alsoFrom(p) posts the round's other receive from rank p,
// right after the step that receives p's piece (a pair's messages match in the order they
// are posted, and p sends its piece first); onFolded(last) posts what goes out of dst: `last` is
// the final step's receive, to forward slice by slice as it lands (Exchange::sendForward), or null
// when the final step was local (dst is complete then). One wait for the whole round.
// Sends this rank's folded block to `peer`: the fold's last step forwarded as it lands, or,
// when there was no step to fold (`last` empty), the block as it is.
void sendFolded(Exchange& ex, int peer, const MsgRef& last, const char* block, size_t bytes) {
  if (last) {
    ex.sendForward(peer, last);
  } else {
    ex.send(peer, block, bytes);
  }
}

template <typename SendPiece, typename AlsoFrom, typename OnFolded>
void foldRound(Exchange& ex, const CollArgs& args, SendPiece&& sendPiece,
               const std::vector<size_t>& elems, const void* mine, void* dst, AlsoFrom&& alsoFrom,
               OnFolded&& onFolded) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t es = dtypeSize(args.dtype);
  const size_t count = elems[me], myBytes = count * es;
  for (int i = 1; i < n; ++i) {
    const int peer = (me + i) % n;
    if (elems[peer] > 0) ex.send(peer, sendPiece(peer), elems[peer] * es);
  }
  if (myBytes == 0) {
    for (int p = 0; p < n; ++p) {
      if (p != me) alsoFrom(p);
    }
    ex.wait();
    return;
  }
  Device& dev = ex.device();
  // Sum and product give the same bits with their operands swapped (IEEE + and * are
  // commutative; NaN payloads aside, when two ranks feed NaNs): rank 1 then folds in0 into its
  // own piece in one pass instead of receiving in0 and reducing its piece into it (two).
  const bool symmetric = args.op == xcclSum || args.op == xcclProd;
  // In place, dst is mine, which must stay until my own step: the running fold lives in a
  // temporary until then, and my step writes (fold op mine) into dst. (Rank 0 starts from
  // its own piece; rank 1's swapped first step reads mine as its local operand.) A copy of
  // mine kept aside instead cost one more pass over the block: the ring gains about half its
  // time from working in place on 4 ranks here, this fold had gained less.
  const bool foldAside = me != 0 && dst == mine && !(me == 1 && symmetric);
  DeviceBuffer aside(ex, foldAside ? myBytes : 0);
  char* acc = foldAside ? aside.get() : static_cast<char*>(dst);
  int next = 0;  // the rank whose piece the next step folds in
  int left = 0;  // messages of the posted step not yet complete
  // Posts the next step that needs a message (local steps run at once) and, after the last,
  // what goes out; false when nothing more was posted.
  auto advance = [&]() -> bool {
    while (next < n) {
      const int r = next++;
      if (r == 0 && me == 0) continue;  // in0 is mine: the step of rank 1 reads it in place
      if (r == me) {
        // acc op in_me (in place, b is dst itself: the kernels are element-wise)
        dev.reduce(dst, acc, mine, count, args.dtype, args.op);
        acc = static_cast<char*>(dst);
        if (r == n - 1) {
          onFolded(MsgRef());
          return true;
        }
        continue;
      }
      ex.countMessagesIn(&left);
      MsgRef step;
      if (r == 1 && me == 0) {
        step = ex.recvReduce(1, acc, mine, count, args.dtype, args.op);  // in0 op in1
      } else if (r == 0 && me == 1 && symmetric) {
        step = ex.recvReduce(0, acc, mine, count, args.dtype, args.op);  // in1 op in0
        ++next;  // my own step is done with it
      } else if (r == 0) {
        step = ex.recv(0, acc, myBytes);  // acc = in0
      } else {
        step = ex.recvReduce(r, acc, acc, count, args.dtype, args.op);  // acc op in_r
      }
      ex.countMessagesIn(nullptr);
      alsoFrom(r);
      if (next >= n) onFolded(step);  // the last step
      return true;
    }
    return false;
  };
  advance();
  ex.wait([&] { return left == 0 && advance(); });
}

// The elements of each rank's block.
std::vector<size_t> sizesOf(const Blocks& b) {
  std::vector<size_t> v(b.nblocks);
  for (int r = 0; r < b.nblocks; ++r) v[r] = b.size(r);
  return v;
}

void allreduceRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t es = dtypeSize(args.dtype);
  const size_t perRound = pieceElems(ex, es) * static_cast<size_t>(n);
  for (size_t off = 0; off < args.count; off += perRound) {
    const Blocks b{std::min(perRound, args.count - off), n};
    const char* send = at(args.sendbuf, off * es);
    char* recv = at(args.recvbuf, off * es);
    const std::vector<size_t> elems = sizesOf(b);
    char* myBlock = recv + b.first(me) * es;
    // The other owners' folded blocks come back into recvbuf. In place, block p of recvbuf
    // is also what I send p: p's folded slice k can only exist after my slice k reached p.
    auto receiveTheOthers = [&](int peer) {
      if (elems[peer] > 0) ex.recv(peer, recv + b.first(peer) * es, elems[peer] * es);
    };
    auto sendMine = [&](const MsgRef& last) {
      for (int i = 1; i < n; ++i) sendFolded(ex, (me + i) % n, last, myBlock, elems[me] * es);
    };
    foldRound(
        ex, args, [&](int peer) { return send + b.first(peer) * es; }, elems,
        send + b.first(me) * es, myBlock, receiveTheOthers, sendMine);
  }
}

void reduceRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank(), root = args.root;
  const size_t es = dtypeSize(args.dtype);
  const size_t perRound = pieceElems(ex, es) * static_cast<size_t>(n);
  DeviceBuffer folded(ex, me == root ? 0 : Blocks{std::min(perRound, args.count), n}.size(0) * es);
  for (size_t off = 0; off < args.count; off += perRound) {
    const Blocks b{std::min(perRound, args.count - off), n};
    const char* send = at(args.sendbuf, off * es);
    const std::vector<size_t> elems = sizesOf(b);
    char* myBlock = me == root ? at(args.recvbuf, (off + b.first(me)) * es) : folded.get();
    auto rootReceives = [&](int peer) {
      if (me == root && elems[peer] > 0) {
        ex.recv(peer, at(args.recvbuf, (off + b.first(peer)) * es), elems[peer] * es);
      }
    };
    auto toRoot = [&](const MsgRef& last) {
      if (me != root) sendFolded(ex, root, last, myBlock, elems[me] * es);
    };
    foldRound(
        ex, args, [&](int peer) { return send + b.first(peer) * es; }, elems,
        send + b.first(me) * es, myBlock, rootReceives, toRoot);
  }
}

// Reducescatter and its v form: rank r's block of sendbuf starts at element start(r) and
// holds size(r) elements; this rank's block of the result is recvbuf.
template <typename Start, typename Size>
void reduceScatterRounds(Exchange& ex, const CollArgs& args, Start&& start, Size&& size) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t es = dtypeSize(args.dtype);
  const size_t per = pieceElems(ex, es);
  size_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max<size_t>(longest, size(r));
  for (size_t off = 0; off < longest; off += per) {
    std::vector<size_t> elems(n);
    for (int r = 0; r < n; ++r) {
      const size_t s = size(r);
      elems[r] = off < s ? std::min(per, s - off) : 0;
    }
    foldRound(
        ex, args, [&](int peer) { return at(args.sendbuf, (start(peer) + off) * es); }, elems,
        at(args.sendbuf, (start(me) + off) * es), at(args.recvbuf, off * es), [](int) {},
        [](const MsgRef&) {});
  }
}

void reduceScatterRun(Exchange& ex, const CollArgs& args) {
  reduceScatterRounds(
      ex, args, [&](int r) { return static_cast<size_t>(r) * args.count; },
      [&](int) { return args.count; });
}

void reduceScatterVRun(Exchange& ex, const CollArgs& args) {
  reduceScatterRounds(
      ex, args, [&](int r) { return static_cast<size_t>(args.sdispls[r]); },
      [&](int r) { return static_cast<size_t>(args.recvcounts[r]); });
}

// "foldchain" allreduce: the left fold as a pipeline along the ranks in rank order, then the
// result back along a chain. Chunks of XCCL_CHAIN_CHUNK bytes, all posted at once:
//
//   rank 0:        send in0[c] to 1                     recv out[c] from n-1, forward to 1
//   rank r:        recvReduce acc[c] from r-1 with inr,  recv out[c] from r-1, forward to r+1
//                  forward to r+1                       (rank n-2: not forwarded)
//   rank n-1:      recvReduce out[c] from n-2 with in(n-1), forward to 0
//
// Rank r computes in_r op acc, which is acc op in_r bit for bit only when op is commutative
// in IEEE arithmetic: sum and product (NaN payloads aside, as "ordered"'s swapped first step),
// and every op of the integer types; the floating max and min are not (max(+0, -0) keeps its
// first operand), so the chain declines them. The partial and then the result both land in
// recvbuf: the result's slice k exists only after the next rank consumed the partial's.
// Every rank sends and reduces one buffer (the middle ranks forward a second): the whole
// system moves 2(n-1) buffers and reduces n-1, as a ring does, but each rank talks to its two
// neighbours in rank order only, and in a pipeline, which suits ranks that share cores.
void chainAllreduceRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t es = dtypeSize(args.dtype);
  const int prev = (me + n - 1) % n, next = (me + 1) % n;
  // The result's chain: n-1 -> 0 -> 1 -> ... -> n-2.
  const bool forwardsResult = me != n - 2 && me != n - 1;
  forEachPiece(args.count, es, ex.tuning().chainChunk, [&](size_t first, size_t elems) {
    const size_t off = first * es;
    if (me == 0) {
      ex.send(next, at(args.sendbuf, off), elems * es);
    } else {
      MsgRef acc = ex.recvReduce(prev, at(args.recvbuf, off), at(args.sendbuf, off), elems,
                                 args.dtype, args.op);
      ex.sendForward(next, acc);  // rank n-1: the result, to rank 0
    }
  });
  if (me != n - 1) {
    forEachPiece(args.count, es, ex.tuning().chainChunk, [&](size_t first, size_t elems) {
      const size_t off = first * es;
      MsgRef out = ex.recv(prev, at(args.recvbuf, off), elems * es);
      if (forwardsResult) ex.sendForward(next, out);
    });
  }
  ex.wait();
}

bool chainAllreduceSupports(const CollArgs& args, const Exchange& ex) {
  return ex.nranks() > 1 && (args.op == xcclSum || args.op == xcclProd || !isFloatType(args.dtype));
}

bool always(const CollArgs&, const Exchange&) { return true; }

}  // namespace

std::vector<Algorithm> orderedAlgorithms() {
  Algorithm list[] = {
      {"ordered", CollType::kAllReduce, always, allreduceRun},
      {"foldchain", CollType::kAllReduce, chainAllreduceSupports, chainAllreduceRun},
      {"ordered", CollType::kReduce, always, reduceRun},
      {"ordered", CollType::kReduceScatter, always, reduceScatterRun},
      {"ordered", CollType::kReduceScatterv, always, reduceScatterVRun}};
  for (Algorithm& a : list) a.ordered = true;
  return {std::begin(list), std::end(list)};
}

}  // namespace algo
}  // namespace xccl
