// AllReduce schedules.
//
// "ring" (bandwidth-optimal, any size): the buffer is cut into nranks blocks, block j
// belonging to ring position j; every block is cut into slices of XCCL_RING_SLICE bytes
// (one message each). With p = my ring position, n = nranks, 2(n-1) steps:
//
//   reduce-scatter, step s = 0..n-2:  send block (p-1-s) to next, recvReduce block (p-2-s)
//                                     from prev into recvbuf (local = sendbuf block)
//   allgather,      step s = 0..n-2:  send block (p-s) to next, recv block (p-1-s) from prev
//
//        pos0      pos1      pos2            after reduce-scatter pos p owns block p fully
//   s0:  b2 -->    b0 -->    b1 -->  (wraps)  reduced; allgather then passes every owned
//   s1:  b1 -->    b2 -->    b0 -->           block once around the ring.
//
// All 2(n-1) steps are posted at once; each step's send forwards what the previous step
// received, slice by slice as it lands (Exchange::sendForward), so the steps overlap.
// Each block is reduced exactly once (by one chain of ranks) and then copied, so all ranks
// end with bit-identical results. Step 0 sends straight from sendbuf and every recvReduce
// reads its local operand from sendbuf, so out-of-place never copies sendbuf to recvbuf.
//
// "direct" (latency-optimal, small messages): one step. Every rank sends its whole sendbuf
// to every other rank and receives the n-1 others into a temporary (slot i = rank i), then
// folds in rank order: recvbuf = ((in0 op in1) op in2) ... - identical on every rank.
//
// "recdoubling" (small messages on many ranks): log2(n) rounds of one exchange each, so the
// latency grows with log n where direct's grows with n (every rank sends n-1 messages).
// With p the largest power of two <= n and e = n - p extra ranks:
//
//   fold:    ranks 0..2e-1 pair up; even rank 2i sends its input to 2i+1 and waits
//   rounds:  the p remaining ranks (index q: 2i+1 -> i, r >= 2e -> r-e), mask = 1, 2, ..:
//            exchange partials with index q^mask, partial = partial op theirs
//   unfold:  rank 2i+1 sends the result to rank 2i
//
// Partners combine the same two partials, and op is commutative for every type (IEEE + and
// * included), so every rank ends with the same bits. The partials alternate between two
// scratch halves: a round reads one and writes the other, never the buffer it sends.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/param.h"
#include "schedule.h"

namespace xccl {
namespace algo {

namespace {
bool needsOwnSlot(int me, const void* mine, const void* dst) { return dst == mine && me != 0; }
}  // namespace

FoldInputs::FoldInputs(Exchange& ex, int nranks, int me, const void* mine, const void* dst,
                       size_t bytes)
    : device_(ex.device()),
      temp_(ex, bytes * (needsOwnSlot(me, mine, dst) ? nranks : nranks - 1)),
      slots_(nranks, nullptr),
      in_(nranks) {
  const bool ownSlot = needsOwnSlot(me, mine, dst);
  for (int r = 0, used = 0; r < nranks; ++r) {
    if (r == me && !ownSlot) {
      in_[r] = mine;
      continue;
    }
    slots_[r] = temp_.get() + bytes * used++;
    in_[r] = slots_[r];
  }
  if (ownSlot) device_.copy(slots_[me], mine, bytes, CopyKind::kDeviceToDevice);
}

// The host fold's chunk: small enough that a chunk of dst and of every input of a few ranks
// stay in a core's L2 while it is folded.
constexpr size_t kFoldChunkBytes = 32 << 10;

void FoldInputs::fold(void* dst, size_t count, xcclDataType_t dtype, xcclRedOp_t op) const {
  if (in_.size() == 1) {
    device_.copy(dst, in_[0], count * dtypeSize(dtype), CopyKind::kDeviceToDevice);
    return;
  }
  // On the host, chunk by chunk: each chunk of dst is folded over all inputs while it stays in
  // cache (one read of every input and one write of dst, instead of a pass per input). Each
  // element is still folded in rank order, so the bits are the same. Device kernels take
  // whole buffers (a launch per chunk would cost more than the cache saves).
  const size_t es = dtypeSize(dtype);
  const size_t chunk = std::strcmp(device_.name(), "host") == 0
                           ? std::max<size_t>(1, kFoldChunkBytes / es)
                           : std::max<size_t>(count, 1);
  for (size_t at = 0; at < count; at += chunk) {
    const size_t n = std::min(chunk, count - at);
    char* d = static_cast<char*>(dst) + at * es;
    auto in = [&](size_t i) { return static_cast<const char*>(in_[i]) + at * es; };
    device_.reduce(d, in(0), in(1), n, dtype, op);
    for (size_t i = 2; i < in_.size(); ++i) device_.reduce(d, d, in(i), n, dtype, op);
  }
}

namespace {

// One ring over `members` (ranks in ring order; I am at position `pos`) moving the blocks of
// a region of the buffers. The whole schedule is posted before a single wait(): a block that
// arrives in one step is forwarded in the next (sendForward) slice by slice as it lands, so
// a slice is reduced, forwarded and copied while it is still in cache, and no step waits
// for the previous one to finish.
struct Ring {
  Exchange& ex;
  const char* sendbuf;  // the region's bases (the whole buffers for the flat ring)
  char* recvbuf;
  xcclDataType_t dtype;
  xcclRedOp_t op;
  Blocks blocks;  // the region cut into one block per member
  int next, prev, pos, n;
  size_t elemSize, sliceBytes;

  Ring(Exchange& ex, const CollArgs& args, const void* send, void* recv, size_t count,
       const std::vector<int>& members, int pos)
      : ex(ex),
        sendbuf(static_cast<const char*>(send)),
        recvbuf(static_cast<char*>(recv)),
        dtype(args.dtype),
        op(args.op),
        blocks{count, static_cast<int>(members.size())},
        next(members[(pos + 1) % members.size()]),
        prev(members[(pos + members.size() - 1) % members.size()]),
        pos(pos),
        n(static_cast<int>(members.size())),
        elemSize(dtypeSize(args.dtype)),
        sliceBytes(ex.tuning().ringSlice) {}

  // Sends block `b` from `base`, one message per slice.
  void send(const char* base, int b) {
    const size_t first = blocks.first(b);
    forEachPiece(blocks.size(b), elemSize, sliceBytes, [&](size_t slice, size_t elems) {
      ex.send(next, base + (first + slice) * elemSize, elems * elemSize);
    });
  }
  // Receives block `b` from prev into recvbuf, reducing with sendbuf or plainly.
  std::vector<MsgRef> recv(int b, bool reduce) {
    std::vector<MsgRef> landed;
    const size_t first = blocks.first(b);
    forEachPiece(blocks.size(b), elemSize, sliceBytes, [&](size_t slice, size_t elems) {
      const size_t offset = (first + slice) * elemSize;
      landed.push_back(
          reduce ? ex.recvReduce(prev, recvbuf + offset, sendbuf + offset, elems, dtype, op)
                 : ex.recv(prev, recvbuf + offset, elems * elemSize));
    });
    return landed;
  }
  void forward(const std::vector<MsgRef>& landed) {
    for (const MsgRef& m : landed) ex.sendForward(next, m);
  }

  // Reduce-scatter, step s: send block pos-1-s (step 0 from sendbuf, later the block reduced
  // in step s-1), recvReduce block pos-2-s. Returns the receipt of block pos (fully reduced).
  std::vector<MsgRef> reduceScatter() {
    send(sendbuf, mod(pos - 1, n));
    std::vector<MsgRef> landed = recv(mod(pos - 2, n), /*reduce=*/true);
    for (int s = 1; s < n - 1; ++s) {
      forward(landed);
      landed = recv(mod(pos - 2 - s, n), /*reduce=*/true);
    }
    return landed;
  }
  // Allgather, step s: pass on the block that landed last (step 0: block pos, as
  // reduceScatter() receives it, or from recvbuf when `owned` is empty), receive block
  // pos-1-s.
  void allgather(const std::vector<MsgRef>& owned) {
    std::vector<MsgRef> landed = owned;
    for (int s = 0; s < n - 1; ++s) {
      if (s == 0 && landed.empty()) {
        send(recvbuf, pos);
      } else {
        forward(landed);
      }
      landed = recv(mod(pos - 1 - s, n), /*reduce=*/false);
    }
  }
};

void ringRun(Exchange& ex, const CollArgs& args) {
  Ring ring(ex, args, args.sendbuf, args.recvbuf, args.count, ex.ring(), ex.ringPos(ex.rank()));
  ring.allgather(ring.reduceScatter());
  ex.wait();
}

// "hierarchical": H hosts of L ranks each. The buffer is cut into L blocks; the rank at
// position i of its host's run owns block i:
//   1. reduce-scatter along the host's run (shared memory): block i reduced over the host;
//   2. allreduce of block i along the "column" of the ranks at position i of every host
//      (the network: each rank moves 2(H-1)/H of 1/L of the buffer), as a ring, or from
//      XCCL_HIERARCHICAL_LOG_MIN_HOSTS hosts on by Rabenseifner's halving and doubling;
//   3. allgather along the host's run.
// Across hosts each host sends 2(H-1)/H of the buffer in all, where the flat ring sends
// 2(n-1)/n of it through every host's network hop: for 2 hosts of 2 ranks, 1 against 1.5.
void rabenseifnerOver(Exchange& ex, const CollArgs& args, const std::vector<int>& members, int pos,
                      const void* sendbuf, void* recvbuf, size_t count);

void hierarchicalRun(Exchange& ex, const CollArgs& args) {
  const auto& hosts = ex.hosts();
  const int host = ex.hostOf(ex.rank());
  const auto& run = hosts[host];
  const int local = static_cast<int>(std::find(run.begin(), run.end(), ex.rank()) - run.begin());
  std::vector<int> column;
  column.reserve(hosts.size());
  for (const auto& h : hosts) column.push_back(h[local]);

  Ring intra(ex, args, args.sendbuf, args.recvbuf, args.count, run, local);
  intra.reduceScatter();
  ex.wait();
  const size_t first = intra.blocks.first(local), elemSize = dtypeSize(args.dtype);
  char* mine = static_cast<char*>(args.recvbuf) + first * elemSize;
  if (static_cast<int64_t>(hosts.size()) >= ex.tuning().hierarchicalLogMinHosts) {
    // Many hosts: the column's allreduce in 2 log2 H network rounds instead of the ring's
    // 2(H-1), the same bytes (docs/SIMULATOR.md: the ring column's latencies dominated
    // from a few thousand ranks).
    rabenseifnerOver(ex, args, column, host, mine, mine, intra.blocks.size(local));
  } else {
    Ring inter(ex, args, mine, mine, intra.blocks.size(local), column, host);
    inter.allgather(inter.reduceScatter());
    ex.wait();
  }
  intra.allgather({});
  ex.wait();
}

// "twolevel" (small messages across many hosts): the first rank of each host's run is its
// leader. Members send their input to the leader, which folds the host's inputs in run
// order; leaders exchange the host results and fold them in host order; each leader sends
// the result to its members. The network carries 2(H-1) messages per host instead of n-1
// per rank; every rank gets the leaders' identical fold.
void twolevelRun(Exchange& ex, const CollArgs& args) {
  const auto& hosts = ex.hosts();
  const int host = ex.hostOf(ex.rank()), nhosts = static_cast<int>(hosts.size());
  const auto& run = hosts[host];
  const size_t bytes = args.count * dtypeSize(args.dtype);
  if (run[0] != ex.rank()) {
    ex.send(run[0], args.sendbuf, bytes);
    ex.recv(run[0], args.recvbuf, bytes);
    ex.wait();
    return;
  }
  const int members = static_cast<int>(run.size());
  {
    FoldInputs local(ex, members, 0, args.sendbuf, args.recvbuf, bytes);
    for (int j = 1; j < members; ++j) ex.recv(run[j], local.slot(j), bytes);
    ex.wait();
    local.fold(args.recvbuf, args.count, args.dtype, args.op);
  }
  if (nhosts > 1) {
    FoldInputs across(ex, nhosts, host, args.recvbuf, args.recvbuf, bytes);
    for (int h = 0; h < nhosts; ++h) {
      if (h != host) ex.send(hosts[h][0], args.recvbuf, bytes);
    }
    for (int h = 0; h < nhosts; ++h) {
      if (h != host) ex.recv(hosts[h][0], across.slot(h), bytes);
    }
    ex.wait();
    across.fold(args.recvbuf, args.count, args.dtype, args.op);
  }
  for (int j = 1; j < members; ++j) ex.send(run[j], args.recvbuf, bytes);
  ex.wait();
}

bool twolevelSupports(const CollArgs& args, const Exchange& ex) {
  size_t widest = 0;
  for (const auto& h : ex.hosts()) widest = std::max(widest, h.size());
  const size_t bytes = args.count * dtypeSize(args.dtype);
  return ex.hosts().size() > 1 && widest > 1 &&
         directTempFits(ex, bytes, static_cast<int>(std::max(widest, ex.hosts().size())));
}

// Only for several hosts of several ranks each, all hosts alike.
bool hierarchicalSupports(const CollArgs&, const Exchange& ex) {
  const auto& hosts = ex.hosts();
  if (hosts.size() < 2 || hosts[0].size() < 2) return false;
  for (const auto& h : hosts) {
    if (h.size() != hosts[0].size()) return false;
  }
  return true;  // blocks may be empty (count < ranks per host): they move nothing
}

bool ringSupports(const CollArgs&, const Exchange&) { return true; }

void directRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t bytes = args.count * dtypeSize(args.dtype);
  FoldInputs in(ex, n, me, args.sendbuf, args.recvbuf, bytes);
  for (int i = 1; i < n; ++i) ex.send((me + i) % n, args.sendbuf, bytes);
  for (int i = 1; i < n; ++i) {
    int peer = (me + n - i) % n;
    ex.recv(peer, in.slot(peer), bytes);
  }
  ex.wait();
  in.fold(args.recvbuf, args.count, args.dtype, args.op);
}

// Declines when the temporary (one buffer per rank) would be too large.
bool directSupports(const CollArgs& args, const Exchange& ex) {
  return directTempFits(ex, args.count * dtypeSize(args.dtype), ex.nranks());
}

// The rank of recursive-doubling index q (see the file comment).
int recDoublingRank(int q, int extras) { return q < extras ? 2 * q + 1 : q + extras; }

void recDoublingRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t bytes = args.count * dtypeSize(args.dtype);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extras = n - p;
  if (me < 2 * extras && me % 2 == 0) {  // folded into me+1, which hands back the result
    ex.send(me + 1, args.sendbuf, bytes);
    ex.recv(me + 1, args.recvbuf, bytes);
    ex.wait();
    return;
  }
  DeviceBuffer scratch(ex, 2 * bytes);
  char* halves[2] = {scratch.get(), scratch.get() + bytes};
  int next = 0;  // the half the next round writes
  const void* partial = args.sendbuf;
  if (me < 2 * extras) {
    ex.recvReduce(me - 1, halves[next], partial, args.count, args.dtype, args.op);
    ex.wait();
    partial = halves[next];
    next ^= 1;
  }
  const int q = me < 2 * extras ? me / 2 : me - extras;
  for (int mask = 1; mask < p; mask *= 2) {
    const int peer = recDoublingRank(q ^ mask, extras);
    // The last round writes recvbuf itself unless that is the buffer it sends.
    void* dst = mask * 2 == p && partial != args.recvbuf ? args.recvbuf : halves[next];
    ex.send(peer, partial, bytes);
    ex.recvReduce(peer, dst, partial, args.count, args.dtype, args.op);
    ex.wait();
    partial = dst;
    next ^= 1;
  }
  if (partial != args.recvbuf) {
    ex.device().copy(args.recvbuf, partial, bytes, CopyKind::kDeviceToDevice);
  }
  if (me < 2 * extras) {
    ex.send(me - 1, args.recvbuf, bytes);
    ex.wait();
  }
}

// Rabenseifner: the fold and unfold of recdoubling around a reduce-scatter by recursive
// halving and an allgather by recursive doubling over the p remaining ranks, the buffer cut
// into p blocks (block q ends at index q). 2 log2 p rounds moving 2(p-1)/p of the buffer,
// where the ring takes 2(n-1) rounds for the same bytes.
//
//   halving,  mask = p/2 .. 1:  keep the half of my range on my side of mask, send the other
//                               half to q^mask, fold its copy of my half into recvbuf
//   doubling, mask = 1 .. p/2:  send my range (mask blocks), receive q^mask's beside it
//
// Every message's regions are disjoint from what the same round writes, so recvbuf is the
// only buffer (the fold's partial excepted); each block is reduced along one fixed tree and
// then copied, so every rank ends with the same bits.
// The schedule over `members` (ranks; I am members[pos]), reducing `count` elements of
// sendbuf into recvbuf (the two may be one buffer): the whole communicator for
// "rabenseifner", the column of a host position for "hierarchical" across many hosts.
void rabenseifnerOver(Exchange& ex, const CollArgs& args, const std::vector<int>& members, int pos,
                      const void* sendbuf, void* recvbuf, size_t count) {
  const int n = static_cast<int>(members.size()), me = pos;
  const size_t esize = dtypeSize(args.dtype), bytes = count * esize;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extras = n - p;
  auto rankOf = [&](int index) { return members[index]; };
  if (me < 2 * extras && me % 2 == 0) {
    ex.send(rankOf(me + 1), sendbuf, bytes);
    ex.recv(rankOf(me + 1), recvbuf, bytes);
    ex.wait();
    return;
  }
  DeviceBuffer folded(ex, me < 2 * extras ? bytes : 0);
  const char* src = static_cast<const char*>(sendbuf);
  if (me < 2 * extras) {
    ex.recvReduce(rankOf(me - 1), folded.get(), src, count, args.dtype, args.op);
    ex.wait();
    src = folded.get();
  }
  char* out = static_cast<char*>(recvbuf);
  const int q = me < 2 * extras ? me / 2 : me - extras;
  const Blocks blocks{count, p};
  // Elements of blocks [lo, lo + len).
  auto first = [&](int lo) { return blocks.first(lo); };
  auto elems = [&](int lo, int len) { return blocks.first(lo + len) - blocks.first(lo); };
  int lo = 0, len = p;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int peer = rankOf(recDoublingRank(q ^ mask, extras));
    len /= 2;
    const int keep = (q & mask) ? lo + len : lo, give = (q & mask) ? lo : lo + len;
    if (elems(give, len) > 0) ex.send(peer, src + first(give) * esize, elems(give, len) * esize);
    if (elems(keep, len) > 0) {
      ex.recvReduce(peer, out + first(keep) * esize, src + first(keep) * esize, elems(keep, len),
                    args.dtype, args.op);
    }
    ex.wait();
    lo = keep;
    src = out;  // from now on the partials are in recvbuf
  }
  if (p == 1 && src != out) ex.device().copy(out, src, bytes, CopyKind::kDeviceToDevice);
  for (int mask = 1; mask < p; mask *= 2) {
    const int peer = rankOf(recDoublingRank(q ^ mask, extras));
    const int theirs = lo ^ mask;  // my range is mask blocks at lo; theirs is beside it
    if (elems(lo, mask) > 0) ex.send(peer, out + first(lo) * esize, elems(lo, mask) * esize);
    if (elems(theirs, mask) > 0) {
      ex.recv(peer, out + first(theirs) * esize, elems(theirs, mask) * esize);
    }
    ex.wait();
    lo = std::min(lo, theirs);
  }
  if (me < 2 * extras) {
    ex.send(rankOf(me - 1), out, bytes);
    ex.wait();
  }
}

void rabenseifnerRun(Exchange& ex, const CollArgs& args) {
  std::vector<int> all(ex.nranks());
  for (int r = 0; r < ex.nranks(); ++r) all[r] = r;
  rabenseifnerOver(ex, args, all, ex.rank(), args.sendbuf, args.recvbuf, args.count);
}

bool recDoublingSupports(const CollArgs& args, const Exchange& ex) {
  return directTempFits(ex, args.count * dtypeSize(args.dtype), 2);
}

}  // namespace

std::vector<Algorithm> allreduceAlgorithms() {
  // ring: the reduce-scatter receives every block but one from prev, the allgather every
  // block but another, so some message comes from prev whenever count > 0; direct: every
  // rank receives from every other.
  return {{"ring", CollType::kAllReduce, ringSupports, ringRun, /*hearsRingPrev=*/true},
          {"hierarchical", CollType::kAllReduce, hierarchicalSupports, hierarchicalRun},
          {"twolevel", CollType::kAllReduce, twolevelSupports, twolevelRun},
          {"direct", CollType::kAllReduce, directSupports, directRun, /*hearsRingPrev=*/true,
           /*ordered=*/true},
          {"recdoubling", CollType::kAllReduce, recDoublingSupports, recDoublingRun},
          {"slot", CollType::kAllReduce, slotSupports, slotRun, /*hearsRingPrev=*/false,
           /*ordered=*/true, /*checksCalls=*/true},
          {"mapped", CollType::kAllReduce, mappedSupports, mappedRun, /*hearsRingPrev=*/false,
           /*ordered=*/true, /*checksCalls=*/true},
          {"rabenseifner", CollType::kAllReduce, ringSupports, rabenseifnerRun}};
}

}  // namespace algo
}  // namespace xccl
