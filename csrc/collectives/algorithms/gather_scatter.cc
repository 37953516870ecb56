// Gather and Scatter: "direct", one step between the root and every other rank.
//
//   gather:   rank i sends its block to the root, which receives it at recvbuf block i
//   scatter:  the root sends sendbuf block i to rank i, which receives it into recvbuf
//
// The root's own block is a device copy, skipped in-place (gather: sendbuf == recvbuf +
// root * block bytes; scatter: recvbuf == sendbuf + root * block bytes). The root posts all
// n-1 messages at once; the transports pace them.
#include "schedule.h"

namespace xccl {
namespace algo {

namespace {

void gatherRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t blockBytes = args.count * dtypeSize(args.dtype);
  if (me != args.root) {
    ex.send(args.root, args.sendbuf, blockBytes);
    ex.wait();
    return;
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) ex.recv(peer, at(args.recvbuf, peer * blockBytes), blockBytes);
  }
  char* mine = at(args.recvbuf, me * blockBytes);
  if (mine != args.sendbuf) {
    ex.device().copy(mine, args.sendbuf, blockBytes, CopyKind::kDeviceToDevice);
  }
  ex.wait();
}

void scatterRun(Exchange& ex, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const size_t blockBytes = args.count * dtypeSize(args.dtype);
  if (me != args.root) {
    ex.recv(args.root, args.recvbuf, blockBytes);
    ex.wait();
    return;
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) ex.send(peer, at(args.sendbuf, peer * blockBytes), blockBytes);
  }
  const char* mine = at(args.sendbuf, me * blockBytes);
  if (mine != args.recvbuf) {
    ex.device().copy(args.recvbuf, mine, blockBytes, CopyKind::kDeviceToDevice);
  }
  ex.wait();
}

bool always(const CollArgs&, const Exchange&) { return true; }

}  // namespace

std::vector<Algorithm> gatherScatterAlgorithms() {
  return {{"direct", CollType::kGather, always, gatherRun},
          {"direct", CollType::kScatter, always, scatterRun}};
}

}  // namespace algo
}  // namespace xccl
