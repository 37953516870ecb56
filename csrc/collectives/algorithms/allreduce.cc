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
#include <cstdint>
#include <vector>

#include "common/param.h"
#include "schedule.h"

namespace xccl {
namespace algo {

XCCL_PARAM(RingSlice, "RING_SLICE", 512 << 10)

namespace {
bool needsOwnSlot(int me, const void* mine, const void* dst) { return dst == mine && me != 0; }
}  // namespace

FoldInputs::FoldInputs(Device& device, int nranks, int me, const void* mine, const void* dst,
                       size_t bytes)
    : device_(device),
      temp_(device, bytes * (needsOwnSlot(me, mine, dst) ? nranks : nranks - 1)),
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
  if (ownSlot) device.copy(slots_[me], mine, bytes, CopyKind::kDeviceToDevice);
}

void FoldInputs::fold(void* dst, size_t count, xcclDataType_t dtype, xcclRedOp_t op) const {
  if (in_.size() == 1) {
    device_.copy(dst, in_[0], count * dtypeSize(dtype), CopyKind::kDeviceToDevice);
    return;
  }
  device_.reduce(dst, in_[0], in_[1], count, dtype, op);
  for (size_t i = 2; i < in_.size(); ++i) device_.reduce(dst, dst, in_[i], count, dtype, op);
}

namespace {

// The whole ring schedule is posted before a single wait(): a block that arrives in one
// step is forwarded in the next (sendForward) slice by slice as it lands, so a slice is
// reduced, forwarded and copied while it is still in cache, and no step waits for the
// previous one to finish.
struct Ring {
  Exchange& ex;
  const CollArgs& args;
  const Blocks& blocks;
  size_t elemSize, sliceBytes;

  // Sends block `b` from `base`, one message per slice.
  void send(const void* base, int b) {
    const size_t first = blocks.first(b);
    forEachPiece(blocks.size(b), elemSize, sliceBytes, [&](size_t slice, size_t elems) {
      ex.send(ex.ringNext(), at(base, (first + slice) * elemSize), elems * elemSize);
    });
  }
  // Receives block `b` from prev into recvbuf, reducing with sendbuf or plainly.
  std::vector<MsgRef> recv(int b, bool reduce) {
    std::vector<MsgRef> landed;
    const size_t first = blocks.first(b);
    forEachPiece(blocks.size(b), elemSize, sliceBytes, [&](size_t slice, size_t elems) {
      const size_t offset = (first + slice) * elemSize;
      landed.push_back(reduce ? ex.recvReduce(ex.ringPrev(), at(args.recvbuf, offset),
                                              at(args.sendbuf, offset), elems, args.dtype, args.op)
                              : ex.recv(ex.ringPrev(), at(args.recvbuf, offset), elems * elemSize));
    });
    return landed;
  }
  void forward(const std::vector<MsgRef>& landed) {
    for (const MsgRef& m : landed) ex.sendForward(ex.ringNext(), m);
  }
};

void ringRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), p = ex.ringPos(ex.rank());
  const Blocks blocks{args.count, n};
  Ring ring{ex, args, blocks, dtypeSize(args.dtype), pieceBytesKnob(xcclParamRingSlice())};
  // Reduce-scatter, step s: send block p-1-s (step 0 from sendbuf, later the block reduced
  // in step s-1), recvReduce block p-2-s.
  ring.send(args.sendbuf, mod(p - 1, n));
  std::vector<MsgRef> landed = ring.recv(mod(p - 2, n), /*reduce=*/true);
  for (int s = 1; s < n - 1; ++s) {
    ring.forward(landed);
    landed = ring.recv(mod(p - 2 - s, n), /*reduce=*/true);
  }
  // Allgather, step s: forward the block that landed last (step 0: block p, fully reduced
  // here), receive block p-1-s.
  for (int s = 0; s < n - 1; ++s) {
    ring.forward(landed);
    landed = ring.recv(mod(p - 1 - s, n), /*reduce=*/false);
  }
  ex.wait();
}

bool ringSupports(const CollArgs&, const Exchange&) { return true; }

void directRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t bytes = args.count * dtypeSize(args.dtype);
  FoldInputs in(ex.device(), n, me, args.sendbuf, args.recvbuf, bytes);
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
  return directTempFits(args.count * dtypeSize(args.dtype), ex.nranks());
}

}  // namespace

std::vector<Algorithm> allreduceAlgorithms() {
  return {{"ring", CollType::kAllReduce, ringSupports, ringRun},
          {"direct", CollType::kAllReduce, directSupports, directRun}};
}

}  // namespace algo
}  // namespace xccl
