#include "derive.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <set>
#include <string>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/bootstrap/bootstrap_internal.h"
#include "common/error.h"
#include "common/log.h"
#include "common/sha256.h"
#include "heartbeat.h"

namespace xccl {
namespace {

// The child's configuration: the caller's, or else the parent's (same device kind, device,
// timeout and name).
xcclConfig_t childConfig(const Comm& parent, const xcclConfig_t* config, const std::string& name) {
  xcclConfig_t cfg = config != nullptr ? readConfig(config) : parent.config();
  if (config == nullptr || config->name == nullptr) cfg.name = name.c_str();
  return cfg;
}

// What the child's creation watches: the parent's record of each member (parent ranks in
// child-rank order; -1 for a rank the parent does not know, as one joining by grow).
MemberWatch watchOf(const Comm& parent, const std::vector<int>& members) {
  MemberWatch w;
  w.silentLimitMs = silenceLimitMs();
  w.services.reserve(members.size());
  w.who.reserve(members.size());
  for (int r : members) {
    if (r < 0) {
      w.services.emplace_back();
      w.who.emplace_back();
      continue;
    }
    const PeerInfo& p = parent.peers()[r];
    w.services.push_back(p.service);
    w.who.push_back(strCat("rank ", w.who.size(), " (parent rank ", r, ", pid ", p.pid, " on ",
                           p.hostname, ")"));
  }
  return w;
}

// A store request to a member's service that failed (reset, or left unanswered): the
// member that hosts it is lost; say which.
[[noreturn]] void hostLost(const Comm& parent, int host, const std::string& holds,
                           const RemoteError& e) {
  const PeerInfo& p = parent.peers()[host];
  throw RemoteError(strCat("rank ", parent.rank(), ": parent rank ", host, " (pid ", p.pid, " on ",
                           p.hostname, "), which holds ", holds,
                           ", is gone or does not answer: ", e.what()));
}

// store.get(key) until the deadline, checking in slices that parent rank `awaited` (who
// writes the key) is not gone (a probe every 100 ms: a local connect, answered by the
// peer's service thread). `host`: the parent rank whose service `store` is, which holds
// `holds`; `what`: the awaited rank's key, for messages.
std::string getWatched(Store& store, const std::string& key, const Deadline& deadline,
                       const Comm& parent, int awaited, int host, const std::string& holds,
                       const std::string& what) {
  constexpr int64_t kSliceMs = 100;
  const PeerInfo& p = parent.peers()[awaited];
  MemberWatch watch;
  watch.services = {p.service};
  watch.who = {strCat("parent rank ", awaited, " (pid ", p.pid, " on ", p.hostname, ")")};
  watch.silentLimitMs = silenceLimitMs();
  for (;;) {
    const int64_t left = deadline.remainingMs();
    try {
      return store.get(key, Deadline::after(left < 0 ? kSliceMs : std::min(left, kSliceMs)));
    } catch (const RemoteError& e) {
      hostLost(parent, host, holds, e);
    } catch (const Timeout&) {
      if (deadline.expired()) {
        throw Timeout(strCat("rank ", parent.rank(), ": ", what, " from parent rank ", awaited,
                             " did not come within ", deadline.budgetMs(), " ms"));
      }
      watch.check(parent.rank(), 0, what);  // rank 0 of the one-member watch: `awaited`
    }
  }
}

// The bootstrap service of parent rank `r` (where a split's votes, a grow's id or a child's
// records meet). Gone, or silent for as long as a heartbeat allows: lost either way (a
// peer's error, as the heartbeat reports a silent one), not a wait of ours that ran out.
std::unique_ptr<Store> connectMemberService(const Comm& parent, int r, const Deadline& deadline) {
  const PeerInfo& p = parent.peers()[r];
  try {
    return connectService(p.service, deadline, silenceLimitMs());
  } catch (const Error& e) {
    throw RemoteError(strCat(
        "rank ", parent.rank(), ": parent rank ", r, " (pid ", p.pid, " on ", p.hostname, ") ",
        e.kind() == ErrorKind::kRemote ? "is gone (its bootstrap service refused or reset us)"
                                       : "does not answer",
        ": ", e.what()));
  }
}

// Builds the communicator of `members` (parent ranks, in child-rank order; this rank among
// them; -1 for a rank new to the parent) through the bootstrap service of members[0], under
// the scope `tag` names. A member whose process is gone fails the waits for it at once.
std::unique_ptr<Comm> deriveComm(Comm& parent, const std::vector<int>& members,
                                 const std::string& tag, const xcclConfig_t& cfg) {
  const int me =
      static_cast<int>(std::find(members.begin(), members.end(), parent.rank()) - members.begin());
  XCCL_CHECK(me < static_cast<int>(members.size()), "rank ", parent.rank(), " is not a member");
  const Deadline deadline = Deadline::after(timeoutMsOf(&cfg));
  auto service = connectMemberService(parent, members[0], deadline);
  auto scoped = makeScopedStore(*service, strCat("derive/", parent.scope(), tag, "/"));
  const std::string secret = me == 0 ? publishSecret(*scoped) : awaitSecret(*scoped, me, deadline);
  auto records = makeScopedStore(*scoped, recordScope(secret));
  try {
    const MemberWatch watch = watchOf(parent, members);
    auto child =
        std::make_unique<Comm>(*records, me, static_cast<int>(members.size()), secret, cfg, &watch);
    retireSecret(secret);
    return child;
  } catch (...) {
    retireSecret(secret);
    throw;
  }
}

std::string listDigest(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += strCat(r, ",");
  auto d = sha256(text.data(), text.size());
  return toHex(std::string(reinterpret_cast<const char*>(d.data()), 6));
}

}  // namespace

std::unique_ptr<Comm> splitComm(Comm& parent, int color, int key, const xcclConfig_t* config) {
  const uint64_t n = parent.nextDerivation();
  const std::string tag = strCat("split", n);
  const Deadline deadline = Deadline::after(parent.timeoutMs());
  // Every member's (colour, key) through the parent's rank 0: a split is collective over a
  // parent that works, so its rank 0 is there (if its process is gone, this fails at once).
  auto service = connectMemberService(parent, 0, deadline);
  auto votes = makeScopedStore(*service, strCat("derive/", parent.scope(), tag, "/vote/"));
  const std::string what = strCat("the split's votes (split ", n, ")");
  try {
    votes->set(std::to_string(parent.rank()), strCat(color, " ", key));
  } catch (const RemoteError& e) {
    hostLost(parent, 0, what, e);
  }
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> mine;  // (key, parent rank) of every member of my colour
  for (int r = 0; r < parent.nranks(); ++r) {
    int c = -1, k = 0;
    const std::string v = r == parent.rank()
                              ? strCat(color, " ", key)
                              : getWatched(*votes, std::to_string(r), deadline, parent, r, 0, what,
                                           strCat("its vote in split ", n));
    if (std::sscanf(v.c_str(), "%d %d", &c, &k) != 2) {
      throw RemoteError(strCat("rank ", parent.rank(), ": malformed split vote of rank ", r));
    }
    if (c == color) mine.emplace_back(k, r);
  }
  std::sort(mine.begin(), mine.end());
  std::vector<int> members;
  members.reserve(mine.size());
  for (const auto& kr : mine) members.push_back(kr.second);
  const std::string name = parent.name().empty() ? "" : strCat(parent.name(), "/split", color);
  const xcclConfig_t cfg = childConfig(parent, config, name);
  XCCL_INFO(INIT, "rank ", parent.rank(), ": split ", n, ", colour ", color, ": ", members.size(),
            " member(s), rank 0 is parent rank ", members[0]);
  return deriveComm(parent, members, strCat(tag, "/c", color), cfg);
}

std::unique_ptr<Comm> shrinkComm(Comm& parent, const std::vector<int>& exclude, bool abortParent,
                                 const xcclConfig_t* config) {
  const uint64_t n = parent.nextDerivation();
  const std::set<int> gone(exclude.begin(), exclude.end());
  std::vector<int> members;
  for (int r = 0; r < parent.nranks(); ++r) {
    if (!gone.count(r)) members.push_back(r);
  }
  if (abortParent) {
    parent.abort();  // pending operations fail now; their peers see the closure
  } else if (parent.lastEnqueued() > 0) {
    parent.wait(parent.lastEnqueued(), -1);  // done or failed, within the parent's timeout
  }
  const std::string name = parent.name().empty() ? "" : strCat(parent.name(), "/shrunk");
  const xcclConfig_t cfg = childConfig(parent, config, name);
  XCCL_INFO(INIT, "rank ", parent.rank(), ": shrink ", n, " of ", parent.nranks(),
            " ranks without ", exclude.size(), ": rank 0 is parent rank ", members[0]);
  std::vector<int> sorted(gone.begin(), gone.end());
  return deriveComm(parent, members, strCat("shrink", n, "/", listDigest(sorted)), cfg);
}

std::unique_ptr<Comm> growComm(Comm* parent, int nranks, const xcclUniqueId* id, int rank,
                               const xcclConfig_t* config) {
  GrowId grow;
  xcclConfig_t cfg{};
  cfg.device = -1;
  std::string name;
  if (parent != nullptr) {
    XCCL_CHECK_ARG(rank == -1, "rank ", rank, ": a member of the communicator being grown keeps ",
                   "its rank and passes -1");
    XCCL_CHECK_ARG(id == nullptr || parseGrowId(*id, &grow),
                   "uniqueId is not a grow id (make it with xcclCommGetUniqueId)");
    XCCL_CHECK_ARG(id == nullptr || grow.oldRanks == parent->nranks(),
                   "the grow id was made for a ", grow.oldRanks,
                   "-rank communicator, this one has ", parent->nranks());
    XCCL_CHECK_ARG(nranks > parent->nranks(), "nranks ", nranks, " must exceed the ",
                   parent->nranks(), " ranks of the communicator being grown");
    const uint64_t n = parent->nextDerivation();
    const Deadline deadline = Deadline::after(parent->timeoutMs());
    auto service = connectMemberService(*parent, 0, deadline);
    auto scoped = makeScopedStore(*service, strCat("derive/", parent->scope(), "grow", n, "/"));
    if (id != nullptr) {
      scoped->set("id", std::string(id->internal, sizeof(id->internal)));
    } else {
      std::string raw;
      try {
        raw = scoped->get("id", deadline);
      } catch (const Error& e) {
        throw Error(e.kind(), strCat("rank ", parent->rank(), ": no member of the communicator ",
                                     "passed the grow id to xcclCommGrow: ", e.what()));
      }
      xcclUniqueId got{};
      XCCL_CHECK(raw.size() == sizeof(got.internal), "grow id of ", raw.size(), " bytes");
      std::memcpy(got.internal, raw.data(), raw.size());
      XCCL_CHECK(parseGrowId(got, &grow), "the published grow id is not one");
    }
    if (parent->lastEnqueued() > 0) parent->wait(parent->lastEnqueued(), -1);
    name = parent->name().empty() ? "" : strCat(parent->name(), "/grown");
    cfg = childConfig(*parent, config, name);
    rank = parent->rank();
  } else {
    XCCL_CHECK_ARG(id != nullptr, "uniqueId is NULL: a joining process needs the grow id");
    XCCL_CHECK_ARG(parseGrowId(*id, &grow),
                   "uniqueId is not a grow id (make it with xcclCommGetUniqueId)");
    XCCL_CHECK_ARG(nranks > grow.oldRanks, "nranks ", nranks, " must exceed the ", grow.oldRanks,
                   " ranks of the communicator being grown");
    XCCL_CHECK_ARG(rank >= grow.oldRanks && rank < nranks, "rank ", rank, " of a joining process ",
                   "must be from ", grow.oldRanks, " to ", nranks - 1);
    if (config != nullptr) cfg = readConfig(config);
  }
  XCCL_INFO(INIT, "rank ", rank, ": grow to ", nranks, " ranks from ", grow.oldRanks, " (",
            parent != nullptr ? "member" : "joining", ")");
  const Deadline deadline = Deadline::after(timeoutMsOf(&cfg));
  std::unique_ptr<Store> service;
  try {
    service = connectService(grow.service, deadline, silenceLimitMs());
  } catch (const Error& e) {
    throw Error(e.kind(), strCat("rank ", rank, ": the process that made the grow id does not ",
                                 "answer on its bootstrap service: ", e.what()));
  }
  auto records = makeScopedStore(*service, strCat("grow/", recordScope(grow.secret)));
  return std::make_unique<Comm>(*records, rank, nranks, grow.secret, cfg);
}

std::vector<bool> probeAlive(Comm& parent, int64_t timeoutMs) {
  const int n = parent.nranks();
  std::vector<bool> alive(n, true);
  const Deadline deadline = Deadline::after(timeoutMs);
  // Concurrently, so that silent peers cost the timeout once, not once each; in batches, so
  // that a large communicator does not start thousands of threads.
  constexpr int kBatch = 64;
  for (int first = 0; first < n; first += kBatch) {
    std::vector<std::pair<int, std::future<bool>>> probes;
    for (int r = first; r < std::min(n, first + kBatch); ++r) {
      if (r == parent.rank()) continue;
      const std::string service = parent.peers()[r].service;
      probes.emplace_back(r, std::async(std::launch::async, [service, deadline] {
                            return probeService(service, deadline);
                          }));
    }
    for (auto& [r, f] : probes) alive[r] = f.get();
  }
  return alive;
}

}  // namespace xccl
