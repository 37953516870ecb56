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
// Each block is reduced exactly once (by one chain of ranks) and then copied, so all ranks
// end with bit-identical results. Step 0 sends straight from sendbuf and every recvReduce
// reads its local operand from sendbuf, so out-of-place never copies sendbuf to recvbuf.
//
// "direct" (latency-optimal, small messages): one step. Every rank sends its whole sendbuf
// to every other rank and receives the n-1 others into a temporary (slot i = rank i), then
// folds in rank order: recvbuf = ((in0 op in1) op in2) ... - identical on every rank.
#include <cstdint>
#include <vector>

#include "collectives/common/param.h"
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

// Posts one step of the ring for `block`: send sendBlock's slices to next; receive the
// slices of recvBlock from prev, reducing (reduce == true) or plainly.
struct RingStep {
  Exchange& ex;
  const CollArgs& args;
  const Blocks& blocks;
  size_t elemSize, sliceBytes;

  void post(const void* sendBase, int sendBlock, int recvBlock, bool reduce) {
    size_t sendFirst = blocks.first(sendBlock), recvFirst = blocks.first(recvBlock);
    forEachPiece(blocks.size(sendBlock), elemSize, sliceBytes, [&](size_t slice, size_t elems) {
      ex.send(ex.ringNext(), at(sendBase, (sendFirst + slice) * elemSize), elems * elemSize);
    });
    forEachPiece(blocks.size(recvBlock), elemSize, sliceBytes, [&](size_t slice, size_t elems) {
      size_t offset = (recvFirst + slice) * elemSize;
      if (reduce) {
        ex.recvReduce(ex.ringPrev(), at(args.recvbuf, offset), at(args.sendbuf, offset), elems,
                      args.dtype, args.op);
      } else {
        ex.recv(ex.ringPrev(), at(args.recvbuf, offset), elems * elemSize);
      }
    });
    ex.wait();
  }
};

void ringRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), p = ex.ringPos(ex.rank());
  const Blocks blocks{args.count, n};
  const int64_t slice = xcclParamRingSlice();  // <= 0: one message per block
  RingStep step{ex, args, blocks, dtypeSize(args.dtype),
                slice > 0 ? static_cast<size_t>(slice) : SIZE_MAX};
  // Reduce-scatter: at step s the block I send is the one I reduced at step s-1.
  for (int s = 0; s < n - 1; ++s) {
    step.post(s == 0 ? args.sendbuf : args.recvbuf, mod(p - 1 - s, n), mod(p - 2 - s, n),
              /*reduce=*/true);
  }
  // Allgather: forward the fully reduced blocks around the ring.
  for (int s = 0; s < n - 1; ++s) {
    step.post(args.recvbuf, mod(p - s, n), mod(p - 1 - s, n), /*reduce=*/false);
  }
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
