// AllToAll and AllToAllv: "pairwise". Block j of sendbuf goes to rank j, block i of recvbuf
// comes from rank i (alltoall: count elements each; alltoallv: sendcounts[j] elements at
// sdispls[j], recvcounts[i] elements at rdispls[i]).
//
//   my own block:        device copy sendbuf block me -> recvbuf block me
//   step s = 1..n-1:     send block (me+s)%n to rank (me+s)%n,
//                        recv block (me-s)%n from rank (me-s)%n, then wait
//
//   n = 4, rank 0:  s1: 0->1, 3->0   s2: 0->2, 2->0   s3: 0->3, 1->0
//
// At every step each rank sends to one peer and receives from one, so no rank is flooded.
// In-place (sendbuf == recvbuf) the send side is first copied into a temporary, because a
// block received at step s would overwrite one still to be sent at a later step.
// Zero-sized blocks are still exchanged as empty messages, so ranks that disagree on
// counts fail with a size mismatch instead of hanging.
#include <algorithm>

#include "schedule.h"

namespace xccl {
namespace algo {

namespace {

// One rank's view of the blocks, in bytes.
struct Layout {
  std::vector<size_t> sendOffset, sendBytes, recvOffset, recvBytes;
  size_t sendExtent() const {
    size_t end = 0;
    for (size_t j = 0; j < sendBytes.size(); ++j) end = std::max(end, sendOffset[j] + sendBytes[j]);
    return end;
  }
};

Layout layoutOf(const CollArgs& args, int n) {
  const size_t elemSize = dtypeSize(args.dtype);
  Layout l;
  for (int j = 0; j < n; ++j) {
    if (args.type == CollType::kAllToAllv) {
      l.sendOffset.push_back(args.sdispls[j] * elemSize);
      l.sendBytes.push_back(args.sendcounts[j] * elemSize);
      l.recvOffset.push_back(args.rdispls[j] * elemSize);
      l.recvBytes.push_back(args.recvcounts[j] * elemSize);
    } else {
      l.sendOffset.push_back(j * args.count * elemSize);
      l.sendBytes.push_back(args.count * elemSize);
      l.recvOffset.push_back(j * args.count * elemSize);
      l.recvBytes.push_back(args.count * elemSize);
    }
  }
  return l;
}

void pairwiseRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const Layout l = layoutOf(args, n);
  const bool inPlace = args.sendbuf == args.recvbuf;
  DeviceBuffer copy(ex, inPlace ? l.sendExtent() : 0);
  const void* sendbuf = args.sendbuf;
  if (inPlace) {
    ex.device().copy(copy.get(), args.sendbuf, l.sendExtent(), CopyKind::kDeviceToDevice);
    sendbuf = copy.get();
  }
  XCCL_CHECK(l.sendBytes[me] == l.recvBytes[me], collName(args.type), ": rank ", me, " sends ",
             l.sendBytes[me], " bytes to itself but expects ", l.recvBytes[me]);
  ex.device().copy(at(args.recvbuf, l.recvOffset[me]), at(sendbuf, l.sendOffset[me]),
                   l.sendBytes[me], CopyKind::kDeviceToDevice);
  for (int s = 1; s < n; ++s) {
    const int to = (me + s) % n, from = (me - s + n) % n;
    ex.send(to, at(sendbuf, l.sendOffset[to]), l.sendBytes[to]);
    ex.recv(from, at(args.recvbuf, l.recvOffset[from]), l.recvBytes[from]);
    ex.wait();
  }
}

bool always(const CollArgs&, const Exchange&) { return true; }

}  // namespace

std::vector<Algorithm> alltoallAlgorithms() {
  return {{"pairwise", CollType::kAllToAll, always, pairwiseRun},
          {"pairwise", CollType::kAllToAllv, always, pairwiseRun}};
}

}  // namespace algo
}  // namespace xccl
