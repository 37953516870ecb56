#include "plan.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>

#include "common/error.h"

namespace xccl {
namespace topo {

namespace {

constexpr int kExactMax = 16;  // ranks per host searched exactly (2^16 subsets)

// bw[i][j] between the members of one host, in member order.
using Matrix = std::vector<std::vector<double>>;

double bottleneck(const Matrix& bw, const std::vector<int>& order, bool cycle) {
  double b = std::numeric_limits<double>::infinity();
  const size_t k = order.size();
  for (size_t i = 0; i + 1 < k; ++i) b = std::min(b, bw[order[i]][order[i + 1]]);
  if (cycle && k > 2) b = std::min(b, bw[order[k - 1]][order[0]]);
  return b;
}

// A Hamiltonian path (cycle: returning to member 0) using only edges of at least `t`, or {}.
// reach[mask] = the members at which a path covering exactly `mask` can end.
std::vector<int> hamiltonian(const Matrix& bw, double t, bool cycle) {
  const int k = static_cast<int>(bw.size());
  std::vector<uint32_t> adj(k, 0);
  for (int i = 0; i < k; ++i) {
    for (int j = 0; j < k; ++j) {
      if (i != j && bw[i][j] >= t) adj[i] |= 1u << j;
    }
  }
  const uint32_t full = (1u << k) - 1;
  std::vector<uint32_t> reach(size_t{1} << k, 0);
  if (cycle) {
    reach[1] = 1;
  } else {
    for (int v = 0; v < k; ++v) reach[1u << v] = 1u << v;
  }
  for (uint32_t mask = 1; mask <= full; ++mask) {
    for (uint32_t ends = reach[mask]; ends != 0; ends &= ends - 1) {
      int v = __builtin_ctz(ends);
      for (uint32_t next = adj[v] & ~mask; next != 0; next &= next - 1) {
        int u = __builtin_ctz(next);
        reach[mask | (1u << u)] |= 1u << u;
      }
    }
  }
  uint32_t ends = reach[full];
  if (cycle && k > 2) ends &= adj[0];
  if (ends == 0) return {};
  // Walk back from the lowest possible end, always to the lowest possible predecessor.
  std::vector<int> rev;
  uint32_t mask = full;
  int v = __builtin_ctz(ends);
  while (true) {
    rev.push_back(v);
    uint32_t rest = mask & ~(1u << v);
    if (rest == 0) break;
    uint32_t prev = reach[rest];
    for (uint32_t p = prev; p != 0; p &= p - 1) {
      int u = __builtin_ctz(p);
      if (adj[u] & (1u << v)) {
        v = u;
        break;
      }
    }
    mask = rest;
  }
  std::reverse(rev.begin(), rev.end());
  // One direction of the two: a path from its lower end, a cycle towards its lower neighbour.
  if (!cycle && rev.front() > rev.back()) std::reverse(rev.begin(), rev.end());
  if (cycle && k > 2 && rev[1] > rev.back()) std::reverse(rev.begin() + 1, rev.end());
  return rev;
}

// Member order for one host: ascending when that is as good as the best; else the best
// order found (exact up to kExactMax members, greedy above).
std::vector<int> orderHost(const Matrix& bw, bool cycle) {
  const int k = static_cast<int>(bw.size());
  std::vector<int> ascending(k);
  for (int i = 0; i < k; ++i) ascending[i] = i;
  if (k <= 2) return ascending;
  std::vector<int> best;
  if (k <= kExactMax) {
    std::set<double, std::greater<double>> candidates;
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) {
        if (i != j) candidates.insert(bw[i][j]);
      }
    }
    for (double t : candidates) {  // the highest threshold a ring exists for
      best = hamiltonian(bw, t, cycle);
      if (!best.empty()) break;
    }
  } else {
    std::vector<char> used(k, 0);
    best.push_back(0);
    used[0] = 1;
    for (int step = 1; step < k; ++step) {
      int from = best.back(), pick = -1;
      for (int u = 0; u < k; ++u) {
        if (!used[u] && (pick < 0 || bw[from][u] > bw[from][pick])) pick = u;
      }
      best.push_back(pick);
      used[pick] = 1;
    }
  }
  if (best.empty() || bottleneck(bw, ascending, cycle) >= bottleneck(bw, best, cycle)) {
    return ascending;
  }
  return best;
}

}  // namespace

int Plan::localIndex(int rank) const {
  const auto& run = hosts[hostOf[rank]];
  return static_cast<int>(std::find(run.begin(), run.end(), rank) - run.begin());
}

Path rankPath(const System& sys, const std::vector<Place>& places, int a, int b) {
  const Place &pa = places[a], &pb = places[b];
  if (pa.host != pb.host) return Path{LinkKind::kNet, sys.netGBs(pa.host, pb.host)};
  if (pa.device >= 0 && pb.device >= 0) return sys.path(pa.device, pb.device);
  // Ranks without devices meet in host memory.
  return Path{LinkKind::kPhb, defaultLinkGBs(LinkKind::kPhb)};
}

Plan planRanks(const System& sys, const std::vector<Place>& places, int channels) {
  const int n = static_cast<int>(places.size());
  XCCL_CHECK_ARG(n > 0, "topology: no ranks to plan");
  Plan plan;
  plan.hostOf.resize(n);
  std::map<int, int> index;  // system host -> plan host, by lowest rank
  for (int r = 0; r < n; ++r) {
    XCCL_CHECK_ARG(places[r].host >= 0 && places[r].host < static_cast<int>(sys.hosts.size()),
                   "topology: rank ", r, " on host ", places[r].host, " which the system lacks");
    auto it = index.find(places[r].host);
    if (it == index.end()) {
      it = index.emplace(places[r].host, static_cast<int>(plan.hosts.size())).first;
      plan.hosts.emplace_back();
      plan.systemHost.push_back(places[r].host);
    }
    plan.hostOf[r] = it->second;
    plan.hosts[it->second].push_back(r);
  }
  const bool oneHost = plan.hosts.size() == 1;
  std::vector<int> ring;
  for (auto& members : plan.hosts) {
    const int k = static_cast<int>(members.size());
    Matrix bw(k, std::vector<double>(k, 0));
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) {
        if (i != j) bw[i][j] = rankPath(sys, places, members[i], members[j]).gbs;
      }
    }
    std::vector<int> order = orderHost(bw, /*cycle=*/oneHost);
    std::vector<int> run;
    run.reserve(order.size());
    for (int i : order) run.push_back(members[i]);
    members = run;
    ring.insert(ring.end(), run.begin(), run.end());
    plan.uniformHosts = plan.uniformHosts && k == static_cast<int>(plan.hosts[0].size());
  }
  plan.bottleneckGBs = std::numeric_limits<double>::infinity();
  for (int i = 0; i < n && n > 1; ++i) {
    int a = ring[i], b = ring[(i + 1) % n];
    if (plan.hostOf[a] != plan.hostOf[b]) ++plan.networkHops;
    Path p = rankPath(sys, places, a, b);
    if (p.gbs < plan.bottleneckGBs ||
        (p.gbs == plan.bottleneckGBs && p.kind > plan.bottleneckKind)) {
      plan.bottleneckGBs = p.gbs;
      plan.bottleneckKind = p.kind;
    }
  }
  plan.rings.push_back(ring);
  for (int c = 1; c < std::max(1, channels) && n > 2; ++c) {
    std::vector<int> back(ring.rbegin(), ring.rend());
    std::rotate(back.begin(), std::find(back.begin(), back.end(), ring[0]), back.end());
    plan.rings.push_back(back);
  }
  return plan;
}

System systemOfHosts(int hosts) {
  System sys;
  for (int h = 0; h < hosts; ++h) sys.addHost("host" + std::to_string(h), 1);
  return sys;
}

}  // namespace topo
}  // namespace xccl
