// The cost model behind `xccl-topo simulate` (collectives/algorithms/cost.h): each
// algorithm's units follow its schedule, oversubscription stretches the CPU's units and not
// the NIC's, the parameters parse strictly, and the predictions rank algorithms the way
// their schedules say they should (latency-bound small, bandwidth-bound large).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collectives/algorithms/cost.h"
#include "collectives/topology/plan.h"
#include "common/error.h"

namespace {

using xccl::CollType;
using xccl::CostFeatures;
using xccl::costFeatures;
using xccl::CostParams;
using xccl::predictUs;

// `hosts` hosts of `perHost` ranks sharing host memory, ranks host by host.
xccl::topo::Plan planOf(int hosts, int perHost) {
  std::vector<xccl::topo::Place> places;
  for (int h = 0; h < hosts; ++h) {
    for (int i = 0; i < perHost; ++i) places.push_back(xccl::topo::Place{h, -1});
  }
  return xccl::topo::planRanks(xccl::topo::systemOfHosts(hosts), places, 1);
}

// Copies: 2(n-1)/n of the buffer sent, and the allgather half of the receipts (the
// reduce-scatter half is reduced on arrival).
TEST(CostModel, RingOnOneHostTakesTwoNMinusOneStepsAndCopiesThreeHalvesOfItsTraffic) {
  const auto plan = planOf(1, 8);
  const double S = 8 << 20;
  CostFeatures f = costFeatures("ring", CollType::kAllReduce, 8 << 20, plan, 0);
  EXPECT_DOUBLE_EQ(f.shmHops, 14);
  EXPECT_DOUBLE_EQ(f.netHops, 0);
  EXPECT_DOUBLE_EQ(f.shmBytes, 3.0 * 7 / 8 * S);
  EXPECT_DOUBLE_EQ(f.reduceBytes, 7.0 / 8 * S);
  EXPECT_DOUBLE_EQ(f.netBytes, 0);
}

TEST(CostModel, RecursiveDoublingLeavesTheHostOnlyForPartnersBeyondIt) {
  const auto plan = planOf(4, 4);  // 16 ranks: masks 1, 2 stay home, 4 and 8 cross
  const double S = 4096;
  CostFeatures f = costFeatures("recdoubling", CollType::kAllReduce, 4096, plan, 0);
  EXPECT_DOUBLE_EQ(f.shmHops, 2);
  EXPECT_DOUBLE_EQ(f.netHops, 2);
  EXPECT_DOUBLE_EQ(f.netBytes, 2 * 4 * S);  // the host's 4 ranks share its NIC
  EXPECT_DOUBLE_EQ(f.reduceBytes, 4 * S);
  // Not a power of two: a fold before and an unfold after.
  CostFeatures odd = costFeatures("recdoubling", CollType::kAllReduce, 4096, planOf(1, 6), 0);
  EXPECT_DOUBLE_EQ(odd.shmHops, 2 + 2);
}

TEST(CostModel, RanksBeyondTheCoresStretchTheCpuButNotTheNic) {
  const auto plan = planOf(2, 8);
  CostFeatures free = costFeatures("hierarchical", CollType::kAllReduce, 1 << 20, plan, 0);
  CostFeatures tight = costFeatures("hierarchical", CollType::kAllReduce, 1 << 20, plan, 4);
  EXPECT_DOUBLE_EQ(tight.shmHops, 2 * free.shmHops);  // 8 ranks on 4 cores
  EXPECT_DOUBLE_EQ(tight.shmBytes, 2 * free.shmBytes);
  EXPECT_DOUBLE_EQ(tight.messages, 2 * free.messages);
  EXPECT_DOUBLE_EQ(tight.netBytes, free.netBytes);
  CostFeatures enough = costFeatures("hierarchical", CollType::kAllReduce, 1 << 20, plan, 16);
  EXPECT_DOUBLE_EQ(enough.shmHops, free.shmHops);
}

TEST(CostModel, ParametersParseStrictlyAndRoundTrip) {
  CostParams p = CostParams::parse("# fitted\nshm_alpha_us 1.5\nshm_gbs 3  # GB/s\ncores 2\n");
  EXPECT_DOUBLE_EQ(p.shmAlphaUs, 1.5);
  EXPECT_DOUBLE_EQ(p.shmGBs, 3);
  EXPECT_DOUBLE_EQ(p.cores, 2);
  CostParams q = CostParams::parse(p.format());
  EXPECT_DOUBLE_EQ(q.shmAlphaUs, p.shmAlphaUs);
  EXPECT_DOUBLE_EQ(q.reduceGBs, p.reduceGBs);
  EXPECT_DOUBLE_EQ(q.cores, p.cores);
  EXPECT_THROW(CostParams::parse("shm_alpah_us 1\n"), xccl::InvalidArgument);  // a typo
  EXPECT_THROW(CostParams::parse("shm_gbs fast\n"), xccl::InvalidArgument);
  EXPECT_THROW(CostParams::parse("shm_gbs -1\n"), xccl::InvalidArgument);
  EXPECT_THROW(CostParams::parse("shm_gbs 0\n"), xccl::InvalidArgument);
  EXPECT_THROW(CostParams::parse("msg_us 1 2\n"), xccl::InvalidArgument);
}

TEST(CostModel, DevicesUseTheirLinksAndTheNicTheSystemDescribes) {
  CostFeatures f;
  f.shmBytes = 1e6;
  f.reduceBytes = 1e6;
  f.netBytes = 1e6;
  CostParams p;  // shm 4 GB/s, reduce 4 GB/s (host memory), device reduce 1000 GB/s
  xccl::SystemRates host{10, 0}, devices{10, 100};
  EXPECT_NEAR(predictUs(f, p, host), 250 + 250 + 100, 1e-6);
  EXPECT_NEAR(predictUs(f, p, devices), 10 + 1 + 100, 1e-6);
  p.netGBs = 20;  // the parameters' network rate wins over the NICs
  EXPECT_NEAR(predictUs(f, p, host), 250 + 250 + 50, 1e-6);
  EXPECT_THROW(predictUs(f, CostParams{}, xccl::SystemRates{}), xccl::InvalidArgument);
}

TEST(CostModel, SmallMessagesFavourFewHopsAndLargeOnesFewBytes) {
  const auto plan = planOf(1, 64);
  CostParams p;
  const xccl::SystemRates rates;
  auto us = [&](const char* alg, size_t bytes) {
    return predictUs(costFeatures(alg, CollType::kAllReduce, bytes, plan, 0), p, rates);
  };
  EXPECT_LT(us("recdoubling", 8), us("ring", 8));
  EXPECT_LT(us("recdoubling", 8), us("direct", 8));
  EXPECT_LT(us("ring", 64 << 20), us("direct", 64 << 20));
  EXPECT_LT(us("rabenseifner", 64 << 20), us("recdoubling", 64 << 20));
  EXPECT_THROW(costFeatures("nosuch", CollType::kAllReduce, 8, plan, 0), xccl::InvalidArgument);
  EXPECT_THROW(costFeatures("ring", CollType::kAllToAll, 8, plan, 0), xccl::InvalidArgument);
  EXPECT_THROW(costFeatures("hierarchical", CollType::kAllReduce, 8, plan, 0),
               xccl::InvalidArgument);  // one host
}

TEST(CostModel, AllgatherAndReducescatterMoveTheOtherRanksShares) {
  const auto plan = planOf(1, 4);
  const double S = 4 << 20;
  CostFeatures ag = costFeatures("ring", CollType::kAllGather, 4 << 20, plan, 0);
  EXPECT_DOUBLE_EQ(ag.shmHops, 3);
  EXPECT_DOUBLE_EQ(ag.shmBytes, 2 * 3 * S / 4);  // shares sent and received
  EXPECT_DOUBLE_EQ(ag.reduceBytes, 0);
  CostFeatures rs = costFeatures("direct", CollType::kReduceScatter, 4 << 20, plan, 0);
  EXPECT_DOUBLE_EQ(rs.shmHops, 1);
  EXPECT_DOUBLE_EQ(rs.reduceBytes, 3 * S / 4);
  CostFeatures rd = costFeatures("direct", CollType::kReduce, 4096, plan, 0);
  EXPECT_DOUBLE_EQ(rd.reduceBytes, 3 * 4096.0);  // the root folds every input
}

TEST(CostModel, BroadcastChainPipelinesAndTheTreeIsLogDeep) {
  const auto plan = planOf(1, 8);
  CostFeatures chain = costFeatures("chain", CollType::kBroadcast, 4 << 20, plan, 0);
  EXPECT_DOUBLE_EQ(chain.shmHops, 7 + 16 - 1);  // fill the 8-rank chain, then 16 chunks
  CostFeatures tree = costFeatures("tree", CollType::kBroadcast, 4096, planOf(1, 9), 0);
  EXPECT_DOUBLE_EQ(tree.shmHops, 4);  // ceil(log2 9)
}

}  // namespace
