// Barrier: "dissemination" with empty messages (header only, no payload).
//
//   round k = 0..ceil(log2 n)-1, d = 2^k:  send to (me+d)%n, recv from (me-d)%n, then wait
//
//   n = 5:  k0: 0->1 1->2 2->3 3->4 4->0   k1: 0->2 1->3 ...   k2: 0->4 1->0 ...
//
// After round k every rank has heard, directly or through others, from the 2^(k+1)-1 ranks
// before it, so after the last round no rank leaves before every rank has arrived.
#include "schedule.h"

namespace xccl {
namespace algo {

namespace {

void disseminationRun(Exchange& ex, const CollArgs&) {
  const int n = ex.nranks(), me = ex.rank();
  for (int d = 1; d < n; d *= 2) {
    ex.send((me + d) % n, nullptr, 0);
    ex.recv((me - d + n) % n, nullptr, 0);
    ex.wait();
  }
}

bool always(const CollArgs&, const Exchange&) { return true; }

}  // namespace

std::vector<Algorithm> barrierAlgorithms() {
  return {{"dissemination", CollType::kBarrier, always, disseminationRun}};
}

}  // namespace algo
}  // namespace xccl
