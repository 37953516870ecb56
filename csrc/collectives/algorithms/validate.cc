// validateCollArgs (algorithm.h): the checks of one call that need nothing but the call
// and the world size, shared by the API edge (before enqueueing) and runCollective.
#include <cstdint>

#include "algorithm.h"
#include "collectives/device/device.h"
#include "common/error.h"

namespace xccl {

void validateCollArgs(const CollArgs& args, int rank, int n) {
  const char* coll = collName(args.type);
  XCCL_CHECK_ARG(args.dtype >= 0 && args.dtype < xcclNumTypes, coll, ": invalid datatype ",
                 static_cast<int>(args.dtype));
  if (isReduction(args.type)) {
    XCCL_CHECK_ARG(args.op >= 0 && args.op < xcclNumOps, coll, ": invalid reduction op ",
                   static_cast<int>(args.op));
    XCCL_CHECK_ARG(opSupported(args.dtype, args.op), coll, ": op ", xcclOpName(args.op),
                   " is not supported for datatype ", xcclTypeName(args.dtype));
  }
  if (hasRoot(args.type)) {
    XCCL_CHECK_ARG(args.root >= 0 && args.root < n, coll, ": root ", args.root,
                   " is out of range for ", n, " ranks");
  }
  if (args.type == CollType::kSend || args.type == CollType::kRecv) {
    XCCL_CHECK_ARG(args.root >= 0 && args.root < n, coll, ": peer ", args.root,
                   " is out of range for ", n, " ranks");
  }
  if (args.type == CollType::kRecvAny) {
    XCCL_CHECK_ARG(n > 1, coll, ": there is no other rank to receive from (1 rank)");
  }
  const size_t elemSize = dtypeSize(args.dtype);
  // count * elemSize * n <= SIZE_MAX, by a multiplication (two divisions were most of the
  // check's time on every call); elemSize * n cannot overflow (elemSize <= 8, n an int).
  size_t bytes = 0;
  XCCL_CHECK_ARG(!__builtin_mul_overflow(args.count, elemSize * static_cast<size_t>(n), &bytes),
                 coll, ": count ", args.count, " overflows the buffer size");
  if (args.type == CollType::kAllGatherv || args.type == CollType::kReduceScatterv) {
    const bool gather = args.type == CollType::kAllGatherv;
    const std::vector<size_t>& displs = gather ? args.rdispls : args.sdispls;
    const size_t nn = static_cast<size_t>(n);
    XCCL_CHECK_ARG(args.recvcounts.size() == nn && displs.size() == nn, coll,
                   ": recvcounts and displs need ", n, " entries each, got ",
                   args.recvcounts.size(), " and ", displs.size());
    size_t total = 0;
    for (int j = 0; j < n; ++j) {
      XCCL_CHECK_ARG(args.recvcounts[j] <= SIZE_MAX / elemSize &&
                         displs[j] <= SIZE_MAX / elemSize - args.recvcounts[j],
                     coll, ": block ", j, " (", args.recvcounts[j], " elements at ", displs[j],
                     ") overflows the buffer size");
      total += args.recvcounts[j];
    }
    if (gather) {
      XCCL_CHECK_ARG(args.count == args.recvcounts[rank], coll, ": rank ", rank, " sends ",
                     args.count, " elements but recvcounts[", rank, "] is ", args.recvcounts[rank]);
      XCCL_CHECK_ARG(args.count == 0 || args.sendbuf != nullptr, coll, ": sendbuff is NULL");
      XCCL_CHECK_ARG(total == 0 || args.recvbuf != nullptr, coll, ": recvbuff is NULL");
    } else {
      XCCL_CHECK_ARG(total == 0 || args.sendbuf != nullptr, coll, ": sendbuff is NULL");
      XCCL_CHECK_ARG(args.recvcounts[rank] == 0 || args.recvbuf != nullptr, coll,
                     ": recvbuff is NULL");
    }
    return;
  }
  if (args.type == CollType::kAllToAllv) {
    const size_t nn = static_cast<size_t>(n);
    XCCL_CHECK_ARG(args.sendcounts.size() == nn && args.sdispls.size() == nn &&
                       args.recvcounts.size() == nn && args.rdispls.size() == nn,
                   coll, ": sendcounts, sdispls, recvcounts and rdispls need ", n,
                   " entries each, got ", args.sendcounts.size(), ", ", args.sdispls.size(), ", ",
                   args.recvcounts.size(), ", ", args.rdispls.size());
    size_t sendTotal = 0, recvTotal = 0;
    for (int j = 0; j < n; ++j) sendTotal += args.sendcounts[j];
    for (int j = 0; j < n; ++j) recvTotal += args.recvcounts[j];
    XCCL_CHECK_ARG(args.sendcounts[rank] == args.recvcounts[rank], coll, ": rank ", rank, " sends ",
                   args.sendcounts[rank], " elements to itself but expects to receive ",
                   args.recvcounts[rank]);
    XCCL_CHECK_ARG(sendTotal == 0 || args.sendbuf != nullptr, coll, ": sendbuff is NULL");
    XCCL_CHECK_ARG(recvTotal == 0 || args.recvbuf != nullptr, coll, ": recvbuff is NULL");
    return;
  }
  if (args.count == 0) return;
  const bool root = args.root == rank;
  bool needSend = true, needRecv = true;
  switch (args.type) {
    case CollType::kBroadcast:
    case CollType::kScatter:
      needSend = root;
      break;
    case CollType::kReduce:
    case CollType::kGather:
      needRecv = root;
      break;
    case CollType::kSend:
      needRecv = false;
      break;
    case CollType::kRecv:
    case CollType::kRecvAny:
      needSend = false;
      break;
    case CollType::kBarrier:
      needSend = needRecv = false;
      break;
    default:
      break;
  }
  XCCL_CHECK_ARG(!needSend || args.sendbuf != nullptr, coll, ": sendbuff is NULL with count ",
                 args.count);
  XCCL_CHECK_ARG(!needRecv || args.recvbuf != nullptr, coll, ": recvbuff is NULL with count ",
                 args.count);
}

}  // namespace xccl
