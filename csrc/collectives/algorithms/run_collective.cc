// runCollective (algorithm.h): the argument semantics above the algorithms.
//   1. validate the arguments (InvalidArgument naming the collective and the bad value);
//   2. nothing to move (count 0, not a handshake) -> return; one rank -> local device copy;
//   3. PremulSum -> scale sendbuf by the scalar into a temporary, then Sum;
//      Avg -> Sum, then divide the elements this rank owns as output by nranks;
//   4. selectAlgorithm(args) (select.cc) and run it.
#include <algorithm>
#include <memory>

#include "algorithm.h"
#include "common/log.h"
#include "schedule.h"

namespace xccl {
namespace {

using algo::at;

// ---- one rank: every collective is a local copy ----

void runLocal(Exchange& ex, const CollArgs& args) {
  Device& device = ex.device();
  const size_t elemSize = dtypeSize(args.dtype);
  switch (args.type) {
    case CollType::kBarrier:
      return;
    case CollType::kAllToAllv:
      if (args.sendbuf == args.recvbuf && args.sdispls[0] == args.rdispls[0]) return;
      device.copy(at(args.recvbuf, args.rdispls[0] * elemSize),
                  at(args.sendbuf, args.sdispls[0] * elemSize), args.sendcounts[0] * elemSize,
                  CopyKind::kDeviceToDevice);
      return;
    case CollType::kAllGatherv:
      device.copy(at(args.recvbuf, args.rdispls[0] * elemSize), args.sendbuf, args.count * elemSize,
                  CopyKind::kDeviceToDevice);
      return;
    case CollType::kReduceScatterv:
      if (args.op == xcclPremulSum) {
        device.scale(args.recvbuf, at(args.sendbuf, args.sdispls[0] * elemSize), args.recvcounts[0],
                     args.dtype, args.scalar);
      } else {
        device.copy(args.recvbuf, at(args.sendbuf, args.sdispls[0] * elemSize),
                    args.recvcounts[0] * elemSize, CopyKind::kDeviceToDevice);
      }
      return;
    default:
      break;
  }
  if (isReduction(args.type) && args.op == xcclPremulSum) {
    device.scale(args.recvbuf, args.sendbuf, args.count, args.dtype, args.scalar);
    return;
  }
  // Avg divides by 1: a copy like every other op (nothing at all in-place).
  if (args.recvbuf != args.sendbuf) {
    device.copy(args.recvbuf, args.sendbuf, args.count * elemSize, CopyKind::kDeviceToDevice);
  }
}

// Elements this rank owns as output of a reduction (Avg divides them by nranks).
size_t ownedOutput(const CollArgs& args, int rank) {
  if (args.type == CollType::kReduce && rank != args.root) return 0;
  if (args.type == CollType::kReduceScatterv) return args.recvcounts[rank];
  return args.count;
}

}  // namespace

void runCollective(Exchange& ex, const CollArgs& args) {
  validateCollArgs(args, ex.rank(), ex.nranks());
  const bool handshake =
      isPointToPoint(args.type) || args.type == CollType::kBarrier || isVector(args.type);
  // Every rank compares its call with its ring predecessor's, even when it has nothing to
  // move, so ranks that disagree fail instead of returning (Exchange::postCheck); schedules
  // that receive from the predecessor anyway compare in their own frames.
  if (args.count == 0 && !handshake) {  // nothing to move on any rank
    if (args.type == CollType::kAllReduce && ex.slotArea() != nullptr &&
        algo::slotSupports(args, ex)) {
      algo::slotRun(ex, args);  // compared through the slots, where the others look
      return;
    }
    ex.postCheck();
    ex.wait();
    return;
  }
  if (ex.nranks() == 1) {
    runLocal(ex, args);
    return;
  }
  CollArgs run = args;
  const bool reduction = isReduction(args.type);
  std::unique_ptr<algo::DeviceBuffer> scaled;
  if (reduction && args.op == xcclPremulSum) {
    // Scale my whole input (reducescatter: all nranks blocks; reducescatterv: up to the end
    // of its last block) and sum the scaled copies.
    size_t inputCount = args.count * (args.type == CollType::kReduceScatter ? ex.nranks() : 1);
    if (args.type == CollType::kReduceScatterv) {
      inputCount = 0;
      for (int j = 0; j < ex.nranks(); ++j) {
        inputCount = std::max(inputCount, args.sdispls[j] + args.recvcounts[j]);
      }
    }
    scaled = std::make_unique<algo::DeviceBuffer>(ex, inputCount * dtypeSize(args.dtype));
    ex.device().scale(scaled->get(), args.sendbuf, inputCount, args.dtype, args.scalar);
    run.sendbuf = scaled->get();
    run.op = xcclSum;
  }
  if (reduction && args.op == xcclAvg) run.op = xcclSum;
  const Algorithm& algorithm = selectAlgorithm(run, ex);
  XCCL_TRACE(COLL, collName(args.type), " ", describeSize(args, ex), " op ",
             reduction ? xcclOpName(args.op) : "-", " root ", args.root, " via ", algorithm.name);
  if ((!algorithm.hearsRingPrev && !algorithm.checksCalls) || handshake) ex.postCheck();
  algorithm.run(ex, run);
  ex.wait();  // the check frames, when the schedule posted nothing after them
  if (reduction && args.op == xcclAvg) {
    size_t owned = ownedOutput(args, ex.rank());
    if (owned > 0) ex.device().divide(args.recvbuf, owned, args.dtype, ex.nranks());
  }
}

}  // namespace xccl
