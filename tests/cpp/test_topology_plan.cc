// Planning over many described systems (1..4 hosts, 1..16 devices, islands, odd counts,
// asymmetric NICs): every ring is a permutation, each host's ranks are one contiguous run
// (the network is crossed the minimum number of times), and the slowest link on the ring is
// the best any ring can have (checked against brute force over all orders where that is
// affordable).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include "collectives/topology/plan.h"
#include "collectives/topology/topo_file.h"

namespace {

using namespace xccl::topo;

struct Described {
  std::string text;
  std::string name;
};

// Hosts with `devs` devices each; `islands` XL islands of equal size per host; NIC speeds.
Described makeSystem(int hosts, int devs, int islands, std::vector<double> nicGbps,
                     unsigned seed = 0) {
  std::ostringstream os;
  os << "system xdev\n";
  std::mt19937 rng(seed);
  for (int h = 0; h < hosts; ++h) {
    os << "host h" << h << " numa 2\n";
    for (int d = 0; d < devs; ++d) os << "device numa " << (d * 2 / std::max(devs, 1)) << "\n";
    os << "nic eth0 gbps " << nicGbps[h % nicGbps.size()] << "\n";
    if (islands > 0 && devs >= 2) {
      int per = std::max(1, devs / islands);
      for (int i = 0; i * per < devs; ++i) {
        int lo = i * per, hi = std::min(devs, lo + per) - 1;
        if (hi > lo) os << "island " << lo << "-" << hi << " XL " << 100 + 50 * (i % 2) << "\n";
      }
    }
    if (seed != 0 && devs >= 3) {  // a few random extra links of random kinds
      const char* kinds[] = {"XL", "PIX", "PXB", "NODE"};
      for (int k = 0; k < devs; ++k) {
        int a = rng() % devs, b = rng() % devs;
        if (a != b)
          os << "link " << a << " " << b << " " << kinds[rng() % 4] << " " << 5 + rng() % 200
             << "\n";
      }
    }
  }
  std::ostringstream name;
  name << hosts << "x" << devs << " islands " << islands << " seed " << seed;
  return {os.str(), name.str()};
}

double ringBottleneck(const System& s, const std::vector<Place>& places,
                      const std::vector<int>& ring) {
  double b = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < ring.size() && ring.size() > 1; ++i) {
    b = std::min(b, rankPath(s, places, ring[i], ring[(i + 1) % ring.size()]).gbs);
  }
  return b;
}

// The best bottleneck any ring with contiguous hosts can have, by brute force over each
// host's orders (small systems only).
double bruteForceBest(const System& s, const std::vector<Place>& places, const Plan& plan) {
  if (plan.hosts.size() == 1) {
    std::vector<int> order = plan.hosts[0];
    std::sort(order.begin() + 1, order.end());
    double best = 0;
    do {
      best = std::max(best, ringBottleneck(s, places, order));
    } while (std::next_permutation(order.begin() + 1, order.end()));
    return best;
  }
  double best = std::numeric_limits<double>::infinity();
  for (const auto& run : plan.hosts) {  // each host's best path, then the network hops
    std::vector<int> order = run;
    std::sort(order.begin(), order.end());
    double hostBest = 0;
    do {
      double b = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i + 1 < order.size(); ++i) {
        b = std::min(b, rankPath(s, places, order[i], order[i + 1]).gbs);
      }
      hostBest = std::max(hostBest, b);
    } while (std::next_permutation(order.begin(), order.end()));
    best = std::min(best, hostBest);
  }
  const auto& ring = plan.ring();
  for (size_t i = 0; i < ring.size(); ++i) {
    int a = ring[i], b = ring[(i + 1) % ring.size()];
    if (plan.hostOf[a] != plan.hostOf[b]) best = std::min(best, rankPath(s, places, a, b).gbs);
  }
  return best;
}

void checkPlan(const System& s, const std::vector<Place>& places, const std::string& what) {
  SCOPED_TRACE(what);
  Plan plan = planRanks(s, places, 2);
  const int n = static_cast<int>(places.size());
  std::set<int> hostsUsed;
  for (const Place& p : places) hostsUsed.insert(p.host);
  for (const auto& ring : plan.rings) {
    std::vector<int> sorted = ring;
    std::sort(sorted.begin(), sorted.end());
    for (int r = 0; r < n; ++r) ASSERT_EQ(sorted[r], r);  // a permutation
    // Each host's ranks form one contiguous run (cyclically): host changes = hosts used.
    int changes = 0;
    for (int i = 0; i < n; ++i) changes += places[ring[i]].host != places[ring[(i + 1) % n]].host;
    EXPECT_EQ(changes, hostsUsed.size() > 1 ? static_cast<int>(hostsUsed.size()) : 0);
  }
  EXPECT_EQ(plan.networkHops, hostsUsed.size() > 1 ? static_cast<int>(hostsUsed.size()) : 0);
  EXPECT_DOUBLE_EQ(plan.bottleneckGBs, ringBottleneck(s, places, plan.ring()));
  size_t widest = 0;
  for (const auto& h : plan.hosts) widest = std::max(widest, h.size());
  if (widest <= 8) EXPECT_DOUBLE_EQ(plan.bottleneckGBs, bruteForceBest(s, places, plan));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(plan.hosts[plan.hostOf[r]][plan.localIndex(r)], r);
  }
}

TEST(TopologyPlan, ManyDescribedSystems) {
  int checked = 0;
  for (int hosts : {1, 2, 3, 4}) {
    for (int devs : {1, 2, 3, 5, 8, 16}) {
      for (int islands : {0, 1, 2, 3}) {
        for (unsigned seed : {0u, 7u, 99u}) {
          Described d = makeSystem(hosts, devs, islands, {100, 25, 50}, seed);
          System s = parseSystem(d.text, d.name);
          std::vector<Place> places;  // one rank per device, host-major
          for (size_t i = 0; i < s.devices.size(); ++i) {
            places.push_back(Place{s.devices[i].host, static_cast<int>(i)});
          }
          checkPlan(s, places, d.name);
          // Interleaved placement (ranks round-robin over hosts), as launchers sometimes do.
          std::vector<Place> inter;
          for (int l = 0; l < devs; ++l) {
            for (int h = 0; h < hosts; ++h) inter.push_back(Place{h, s.deviceAt(h, l)});
          }
          checkPlan(s, inter, d.name + " interleaved");
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 6 * 4 * 3);
}

TEST(TopologyPlan, IslandsAreCrossedOnlyWhereTheyMustBe) {
  // 8 devices: islands {0-3} and {4-7} of XL, one XL bridge 3-4 and 7-0: the ring
  // 0..7 is all XL; with rank order scrambled over devices the planner still finds it.
  System s = parseSystem(
      "host a\ndevices 8\nisland 0-3 XL 100\nisland 4-7 XL 100\n"
      "link 3 4 XL 100\nlink 7 0 XL 100\n",
      "islands");
  std::vector<int> devOfRank = {0, 5, 2, 7, 4, 1, 6, 3};
  std::vector<Place> places;
  for (int d : devOfRank) places.push_back(Place{0, d});
  Plan plan = planRanks(s, places);
  EXPECT_EQ(plan.bottleneckKind, LinkKind::kXl);
  EXPECT_DOUBLE_EQ(plan.bottleneckGBs, 100);
  // Ascending rank order would cross islands at every step: PHB.
  EXPECT_LT(ringBottleneck(s, places, {0, 1, 2, 3, 4, 5, 6, 7}), 100);
}

TEST(TopologyPlan, AscendingOrderIsKeptWhenAsGood) {
  System s = parseSystem("host a\ndevices 6\n", "flat");
  std::vector<Place> places;
  for (int d = 0; d < 6; ++d) places.push_back(Place{0, d});
  EXPECT_EQ(planRanks(s, places).ring(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(TopologyPlan, ChannelsAreTheRingAndItsReverse) {
  System s = parseSystem("host a\ndevices 4\n", "flat");
  std::vector<Place> places;
  for (int d = 0; d < 4; ++d) places.push_back(Place{0, d});
  Plan plan = planRanks(s, places, 2);
  ASSERT_EQ(plan.rings.size(), 2u);
  EXPECT_EQ(plan.rings[1], (std::vector<int>{0, 3, 2, 1}));
}

TEST(TopologyPlan, UnevenHostsAreMarked) {
  System s = parseSystem("host a\ndevices 3\nhost b\ndevices 1\n", "uneven");
  std::vector<Place> places = {{0, 0}, {0, 1}, {0, 2}, {1, 3}};
  Plan plan = planRanks(s, places);
  EXPECT_FALSE(plan.uniformHosts);
  EXPECT_EQ(plan.networkHops, 2);
}

TEST(TopologyPlan, LargeHostsUseTheGreedyOrderAndStayValid) {
  Described d = makeSystem(2, 24, 3, {100}, 5);
  System s = parseSystem(d.text, d.name);
  std::vector<Place> places;
  for (size_t i = 0; i < s.devices.size(); ++i)
    places.push_back(Place{s.devices[i].host, static_cast<int>(i)});
  checkPlan(s, places, d.name);
}

}  // namespace
