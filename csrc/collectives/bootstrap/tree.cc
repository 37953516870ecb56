// Every rank's PeerInfo record to every rank through a tree of the ranks' own bootstrap
// services (bootstrap_internal.h, exchangeRecordsByTree), so that no single store serves
// the n copies of the n records.
//
// The tree covers ranks by contiguous ranges: the node of range [lo, hi) is rank lo, and it
// splits [lo + 1, hi) into at most `fanout` consecutive chunks of nearly equal size, whose
// first ranks are its children. Depth is about log_fanout(n); a subtree's records are one
// contiguous slice of the final list, so no rank sorts anything.
//
//   up:   a rank takes each child's slice from its own service ("tree/up/<child>", which
//         the child set there), appends them to its own record and sets the result in its
//         parent's service ("tree/up/<rank>");
//   down: rank 0 holds the whole list; every rank takes it from its parent's service
//         ("tree/down/<rank>") and sets one copy per child in its own service.
// Each key is taken (read and removed) by its one reader, so the process-long services keep
// nothing. A rank that fails passes "XPLF<why>" on in place of what it owes, up and down,
// so nobody waits for the list that will not come; the reason is passed on unchanged.
#include <algorithm>
#include <utility>

#include "bootstrap_internal.h"
#include "common/error.h"
#include "common/log.h"
#include "common/wait_notice.h"

namespace xccl {

BootstrapTreeNode bootstrapTreeNode(int nranks, int fanout, int rank) {
  XCCL_CHECK_ARG(nranks >= 1 && rank >= 0 && rank < nranks && fanout >= 1, "bootstrap tree of ",
                 nranks, " ranks, fanout ", fanout, ", rank ", rank);
  int lo = 0, hi = nranks, parent = -1, depth = 0;
  for (;;) {
    // [lo + 1, hi) in m chunks, the first `extra` of them one rank longer.
    std::vector<std::pair<int, int>> chunks;
    const int len = hi - lo - 1;
    const int m = std::min(fanout, len);
    int at = lo + 1;
    for (int i = 0; i < m; ++i) {
      const int size = len / m + (i < len % m ? 1 : 0);
      chunks.emplace_back(at, at + size);
      at += size;
    }
    if (rank == lo) {
      BootstrapTreeNode node;
      node.parent = parent;
      node.hi = hi;
      node.depth = depth;
      node.children = std::move(chunks);
      return node;
    }
    for (const auto& [a, b] : chunks) {
      if (rank >= a && rank < b) {
        parent = lo;
        lo = a;
        hi = b;
        break;
      }
    }
    ++depth;
  }
}

namespace {

constexpr int64_t kSliceMs = 250;

// Takes `key` from `svc`, in slices that look at the abort flag and, through `watch`, at the
// member `from` that sets it.
std::string takeWatched(Store& svc, const std::string& key, int rank, int from,
                        const std::string& what, const Deadline& deadline,
                        const std::atomic<bool>& abortFlag, const MemberWatch* watch) {
  WaitNotice notice(strCat(what, " (rank ", rank, "; is rank ", from, " running?)"), BOOT);
  for (;;) {
    if (abortFlag.load()) throw InvalidUsage(strCat("rank ", rank, ": aborted waiting for ", what));
    const int64_t left = deadline.remainingMs();
    const int64_t slice = left < 0 ? kSliceMs : std::min(left, kSliceMs);
    try {
      return svc.take(key, Deadline::after(slice));
    } catch (const Timeout&) {
      notice.tick();
      if (watch != nullptr) watch->check(rank, from, what);
      if (deadline.expired()) {
        throw Timeout(strCat("rank ", rank, ": ", what, " did not arrive within ",
                             deadline.budgetMs(), " ms (is rank ", from,
                             " running, with the same id?)"));
      }
    }
  }
}

}  // namespace

std::vector<std::string> exchangeRecordsByTree(const TreeExchange& x) {
  const BootstrapTreeNode node = bootstrapTreeNode(x.nranks, x.fanout, x.rank);
  const int rank = x.rank;
  auto key = [&](const char* dir, int r) { return strCat(x.scope, "tree/", dir, "/", r); };
  const int64_t trip = x.watch != nullptr ? x.watch->silentLimitMs : 0;
  std::unique_ptr<Store> self, parent;
  bool sentUp = rank == 0, sentDown = false;
  // What this rank owes and will not deliver: the reason instead, as far as it can.
  auto passOn = [&](const std::string& failed) {
    if (!sentUp && parent) {
      sentUp = true;
      try {
        parent->set(key("up", rank), failed);
      } catch (const Error&) {  // the parent is gone too: its own parent hears of it
      }
    }
    if (!sentDown && self) {
      sentDown = true;
      for (const auto& [c, end] : node.children) {
        try {
          self->set(key("down", c), failed);
        } catch (const Error&) {
        }
      }
    }
  };
  // A request to the parent's service that fails: the watch names the parent when its
  // process is gone; otherwise the failure says which rank it was.
  auto named = [&](const RemoteError& e) -> RemoteError {
    const std::string what = strCat("rank ", node.parent, " (its parent in the bootstrap tree)");
    if (x.watch != nullptr) x.watch->check(rank, node.parent, strCat("the service of ", what));
    return RemoteError(strCat("rank ", rank, ": ", what, " could not be reached: ", e.what()));
  };
  try {
    self = connectService(processService(), x.deadline, trip);
    if (rank != 0) {
      try {
        parent = connectService(x.parentService, x.deadline, trip);
      } catch (const RemoteError& e) {
        throw named(e);
      }
    }
    // Up: this rank's slice [rank, node.hi).
    std::vector<std::string> slice{x.mine};
    slice.reserve(node.hi - rank);
    for (const auto& [c, end] : node.children) {
      const std::string what = end - c == 1 ? strCat("rank ", c, "'s record")
                                            : strCat("the records of ranks ", c, "-", end - 1,
                                                     " (rank ", c, "'s subtree)");
      std::string got =
          takeWatched(*self, key("up", c), rank, c, what, x.deadline, x.abortFlag, x.watch);
      const std::string why = peerRecordsFailure(got);
      if (!why.empty()) {
        passOn(got);
        throw RemoteError(strCat("rank ", rank, ": failed below it in the bootstrap tree: ", why));
      }
      for (std::string& r : splitPeerRecords(got, end - c)) slice.push_back(std::move(r));
    }
    // Down: the whole list, to this rank's children before anything is checked.
    std::string all = joinPeerRecords(slice);
    if (rank != 0) {
      try {
        parent->set(key("up", rank), all);
        sentUp = true;
        all = takeWatched(*parent, key("down", rank), rank, node.parent,
                          strCat("every rank's record from rank ", node.parent,
                                 " (its parent in the bootstrap tree)"),
                          x.deadline, x.abortFlag, x.watch);
      } catch (const RemoteError& e) {
        throw named(e);
      }
    }
    for (const auto& [c, end] : node.children) self->set(key("down", c), all);
    sentDown = true;
    const std::string why = peerRecordsFailure(all);
    if (!why.empty()) {
      throw RemoteError(strCat("rank ", rank, ": failed elsewhere in the bootstrap tree: ", why));
    }
    XCCL_TRACE(BOOT, "rank ", rank, ": every record through the bootstrap tree (depth ", node.depth,
               ", ", node.children.size(), " children)");
    return splitPeerRecords(all, x.nranks);
  } catch (const Error& e) {
    passOn(failedPeerRecords(e.what()));
    throw;
  }
}

}  // namespace xccl
