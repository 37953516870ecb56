// Communicators made from communicators: split, shrink, grow, revoke and the liveness probe
// (core/derive.h says how a child's ranks meet without the parent's store).
#include <set>
#include <vector>

#include "api_edge.h"
#include "derive.h"

namespace xccl {
namespace {

xcclComm_t wrap(std::unique_ptr<Comm> impl) {
  if (!impl) return nullptr;
  auto c = std::make_unique<xcclComm>();
  c->impl = std::move(impl);
  return c.release();
}

}  // namespace
}  // namespace xccl

using namespace xccl;  // NOLINT: this file is the API edge

extern "C" {

xcclResult_t xcclCommSplit(xcclComm_t comm, int color, int key, xcclComm_t* newcomm,
                           const xcclConfig_t* config) {
  return guarded("xcclCommSplit", [&] {
    XCCL_CHECK_ARG(newcomm != nullptr, "newcomm is NULL");
    *newcomm = nullptr;
    XCCL_CHECK_ARG(color >= 0 || color == XCCL_SPLIT_NOCOLOR, "color ", color,
                   " must be >= 0 or XCCL_SPLIT_NOCOLOR");
    *newcomm = wrap(splitComm(commOf(comm), color, key, config));
  });
}

xcclResult_t xcclCommShrink(xcclComm_t comm, const int* excludeRanks, int excludeCount,
                            xcclComm_t* newcomm, const xcclConfig_t* config, int shrinkFlags) {
  return guarded("xcclCommShrink", [&] {
    XCCL_CHECK_ARG(newcomm != nullptr, "newcomm is NULL");
    *newcomm = nullptr;
    Comm& parent = commOf(comm);
    XCCL_CHECK_ARG(shrinkFlags == XCCL_SHRINK_DEFAULT || shrinkFlags == XCCL_SHRINK_ABORT,
                   "shrinkFlags ", shrinkFlags, " is neither XCCL_SHRINK_DEFAULT nor ABORT");
    XCCL_CHECK_ARG(excludeRanks != nullptr && excludeCount > 0,
                   "excludeRanks must name at least one rank");
    std::set<int> seen;
    for (int i = 0; i < excludeCount; ++i) {
      const int r = excludeRanks[i];
      XCCL_CHECK_ARG(r >= 0 && r < parent.nranks(), "excludeRanks[", i, "] = ", r,
                     " is not a rank of this ", parent.nranks(), "-rank communicator");
      XCCL_CHECK_ARG(seen.insert(r).second, "rank ", r, " is excluded twice");
      XCCL_CHECK_ARG(r != parent.rank(), "rank ", r,
                     " excludes itself: only the ranks that remain call xcclCommShrink");
    }
    XCCL_CHECK_ARG(excludeCount < parent.nranks(), "every rank is excluded: nothing remains");
    *newcomm = wrap(shrinkComm(parent, std::vector<int>(seen.begin(), seen.end()),
                               shrinkFlags == XCCL_SHRINK_ABORT, config));
  });
}

xcclResult_t xcclCommGetUniqueId(xcclComm_t comm, xcclUniqueId* uniqueId) {
  return guarded("xcclCommGetUniqueId", [&] {
    XCCL_CHECK_ARG(uniqueId != nullptr, "uniqueId is NULL");
    makeGrowId(commOf(comm).nranks(), uniqueId);
  });
}

xcclResult_t xcclCommGrow(xcclComm_t comm, int nranks, const xcclUniqueId* uniqueId, int rank,
                          xcclComm_t* newcomm, const xcclConfig_t* config) {
  return guarded("xcclCommGrow", [&] {
    XCCL_CHECK_ARG(newcomm != nullptr, "newcomm is NULL");
    *newcomm = nullptr;
    *newcomm =
        wrap(growComm(comm != nullptr ? &commOf(comm) : nullptr, nranks, uniqueId, rank, config));
  });
}

xcclResult_t xcclCommRevoke(xcclComm_t comm) {
  return guarded("xcclCommRevoke", [&] { commOf(comm).revoke(); });
}

xcclResult_t xcclCommProbeAlive(xcclComm_t comm, int* alive, int64_t timeout_ms) {
  return guarded("xcclCommProbeAlive", [&] {
    XCCL_CHECK_ARG(alive != nullptr, "alive is NULL");
    XCCL_CHECK_ARG(timeout_ms >= 0, "timeout_ms ", timeout_ms, " is negative");
    std::vector<bool> up = probeAlive(commOf(comm), timeout_ms);
    for (size_t r = 0; r < up.size(); ++r) alive[r] = up[r] ? 1 : 0;
  });
}

}  // extern "C"
