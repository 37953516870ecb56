// Topology: ring construction from host identities (pure functions).
#include <gtest/gtest.h>

#include <set>

#include "collectives/topology/topology.h"

namespace {

using xccl::buildTopology;

void expectPermutation(const std::vector<int>& ring, int n) {
  std::set<int> seen(ring.begin(), ring.end());
  EXPECT_EQ(static_cast<int>(ring.size()), n);
  EXPECT_EQ(static_cast<int>(seen.size()), n);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), n - 1);
}

TEST(Topology, SingleHostRingIsRankOrder) {
  for (int n : {1, 2, 3, 4, 7, 8}) {
    auto t = buildTopology(std::vector<std::string>(n, "A"));
    std::vector<int> want(n);
    for (int i = 0; i < n; ++i) want[i] = i;
    EXPECT_EQ(t.ring, want);
    EXPECT_EQ(t.networkHops, 0);
    EXPECT_EQ(t.hosts.size(), 1u);
  }
}

TEST(Topology, InterleavedHostsAreGroupedToMinimiseNetworkHops) {
  auto t = buildTopology({"A", "B", "A", "B"});
  EXPECT_EQ(t.ring, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(t.networkHops, 2);
  EXPECT_EQ(t.hostOf, (std::vector<int>{0, 1, 0, 1}));
}

TEST(Topology, NetworkHopsEqualHostCount) {
  std::vector<std::string> ids;
  for (int r = 0; r < 8; ++r) ids.push_back(std::string(1, static_cast<char>('A' + r % 3)));
  auto t = buildTopology(ids);
  expectPermutation(t.ring, 8);
  EXPECT_EQ(t.hosts.size(), 3u);
  EXPECT_EQ(t.networkHops, 3);
  // Each host's ranks are contiguous in the ring.
  for (size_t i = 1; i < t.ring.size(); ++i) {
    EXPECT_LE(t.hostOf[t.ring[i - 1]], t.hostOf[t.ring[i]]);
  }
}

TEST(Topology, OneRankPerHost) {
  auto t = buildTopology({"h0", "h1", "h2"});
  EXPECT_EQ(t.ring, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(t.networkHops, 3);
}

TEST(Topology, DescribeNamesTransportsAndRing) {
  auto t = buildTopology({"A", "B", "A"});
  std::vector<std::vector<std::string>> tr = {
      {"", "NET", "SHM"}, {"NET", "", "NET"}, {"SHM", "NET", ""}};
  std::string s = xccl::describeTopology(t, {"a", "b", "a"}, tr);
  EXPECT_NE(s.find("ring: 0 2 1"), std::string::npos) << s;
  EXPECT_NE(s.find("SHM"), std::string::npos) << s;
  EXPECT_NE(s.find("2 host(s), 2 network hop(s)"), std::string::npos) << s;
}

}  // namespace
