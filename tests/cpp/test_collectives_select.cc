// The selector on its own: XCCL_ALGO parsing, the tuning table, declining algorithms.
// An Exchange with no connections is enough: selection only looks at the call and nranks.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>

#include "collectives/algorithms/algorithm.h"
#include "collectives/device/device.h"
#include "common/error.h"
#include "test_util.h"

namespace {

using xccl::CollArgs;
using xccl::CollType;
using xccl_test::ScopedEnv;

// The engine reads the selector's knobs when it is made (Tuning): pick() makes one for each
// choice, on 4 ranks split into hosts_, so a knob the test set applies.
class Select : public ::testing::Test {
 protected:
  std::string pick(CollType type, size_t count, xcclDataType_t dtype = xcclFloat32,
                   xcclRedOp_t op = xcclSum) {
    return choose(type, count, dtype, op, nullptr);
  }
  // What runs when "mapped" learns in its meeting that some rank's buffers cannot be mapped.
  std::string pickUnmapped(CollType type, size_t count, xcclDataType_t dtype = xcclFloat32,
                           xcclRedOp_t op = xcclSum) {
    return choose(type, count, dtype, op, "mapped");
  }
  std::string choose(CollType type, size_t count, xcclDataType_t dtype, xcclRedOp_t op,
                     const char* declined) {
    xccl::Exchange ex(0, 4, xccl::getDevice(-1), std::vector<xccl::Connection*>(4, nullptr),
                      {0, 1, 2, 3}, abort_);
    ex.setHosts(hosts_);
    CollArgs a;
    a.type = type;
    a.count = count;
    a.dtype = dtype;
    a.op = op;
    return declined ? xccl::selectAlgorithmAfter(a, ex, declined).name
                    : xccl::selectAlgorithm(a, ex).name;
  }
  std::atomic<bool> abort_{false};
  std::vector<std::vector<int>> hosts_{{0, 1, 2, 3}};
};

// Point-to-point operations have no algorithm: the communicator posts them on the engine.
TEST_F(Select, EveryCollectiveHasAnAlgorithm) {
  std::set<CollType> covered;
  for (const auto& a : xccl::allAlgorithms()) covered.insert(a.type);
  for (CollType t :
       {CollType::kAllReduce, CollType::kBroadcast, CollType::kReduce, CollType::kAllGather,
        CollType::kReduceScatter, CollType::kAllToAll, CollType::kAllToAllv, CollType::kGather,
        CollType::kScatter, CollType::kBarrier}) {
    EXPECT_TRUE(covered.count(t)) << xccl::collName(t);
  }
}

TEST_F(Select, AutomaticChoiceFollowsMessageSize) {
  ScopedEnv algo("XCCL_ALGO", nullptr);
  ScopedEnv max("XCCL_ALLREDUCE_DIRECT_MAX", "4096");
  EXPECT_EQ(pick(CollType::kAllReduce, 1024), "slot");  // 4 KiB, one host, host memory
  {
    ScopedEnv noSlot("XCCL_SLOT_MAX", "0");
    EXPECT_EQ(pick(CollType::kAllReduce, 1024), "mapped");
    EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1024), "direct");
  }
  {
    ScopedEnv smallSlot("XCCL_SLOT_MAX", "1024");
    EXPECT_EQ(pick(CollType::kAllReduce, 256), "slot");
    EXPECT_EQ(pick(CollType::kAllReduce, 257), "mapped");
    EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 257), "direct");
  }
  EXPECT_EQ(pick(CollType::kAllReduce, 1025), "mapped");  // above the direct size: no slot
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1025), "ring");
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "mapped");  // 4 MiB: above the slots
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1 << 20), "ring");
  EXPECT_EQ(pick(CollType::kBroadcast, 1 << 20), "chain");
  EXPECT_EQ(pick(CollType::kBroadcast, 16), "direct");
  EXPECT_EQ(pick(CollType::kReduce, 1 << 20), "chain");
  EXPECT_EQ(pick(CollType::kAllGather, 1 << 20), "ring");
  EXPECT_EQ(pick(CollType::kReduceScatter, 1 << 20), "ring");
  EXPECT_EQ(pick(CollType::kAllToAll, 5), "pairwise");
  EXPECT_EQ(pick(CollType::kBarrier, 0), "dissemination");
}

// Reproducible allreduces above the direct size: "ordered" below XCCL_FOLDCHAIN_MIN_RANKS
// ranks, the fold chain from there on, but not for the floating max and min.
TEST_F(Select, ReproducibleAllreducesChainFromManyRanks) {
  ScopedEnv algo("XCCL_ALGO", nullptr);
  ScopedEnv on("XCCL_REPRODUCIBLE", "1");
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "mapped");  // its fold is the rank-order one
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1 << 20), "foldchain");  // 4 ranks >= 3
  {
    ScopedEnv from8("XCCL_FOLDCHAIN_MIN_RANKS", "8");
    EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1 << 20), "ordered");
  }
  ScopedEnv from4("XCCL_FOLDCHAIN_MIN_RANKS", "4");
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1 << 20), "foldchain");
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1 << 20, xcclInt32, xcclMax), "foldchain");
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1 << 20, xcclFloat32, xcclMax), "ordered");
  {
    ScopedEnv noReads("XCCL_PEER_READ", "0");  // no reading in place: not even tried
    EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "foldchain");
  }
  EXPECT_EQ(pick(CollType::kAllReduce, 4), "slot");               // small: as before
  EXPECT_EQ(pick(CollType::kReduceScatter, 1 << 20), "ordered");  // allreduce only
}

// Temporaries are kept for the next collective, large ones too (up to 256 MiB in all): a
// 16 MiB one comes back at the same address instead of being faulted in again; the
// smallest that fits is taken; past the budget they are freed.
TEST(Scratch, LargeTemporariesAreKeptAndTheSmallestThatFitsIsTaken) {
  std::atomic<bool> abort{false};
  xccl::Exchange ex(0, 2, xccl::getDevice(-1), std::vector<xccl::Connection*>(2, nullptr), {0, 1},
                    abort);
  const size_t mib = size_t{1} << 20;
  auto big = ex.takeScratch(16 * mib);
  char* const bigPtr = big.ptr;
  ex.giveScratch(big);
  // Freed, its pages would be the first candidates for the next allocation of its size.
  void* other = xccl::getDevice(-1).alloc(16 * mib);
  EXPECT_NE(other, bigPtr) << "the kept temporary was freed";
  auto again = ex.takeScratch(12 * mib);
  EXPECT_EQ(again.ptr, bigPtr) << "a 16 MiB temporary is reused";
  xccl::getDevice(-1).free(other);
  auto small = ex.takeScratch(4096);
  EXPECT_NE(small.ptr, bigPtr);
  ex.giveScratch(again);
  ex.giveScratch(small);
  auto fits = ex.takeScratch(1000);
  EXPECT_NE(fits.ptr, bigPtr) << "the smallest kept temporary that fits";
  ex.giveScratch(fits);
  // Past the budget: a 512 MiB temporary is not kept, and the 16 MiB one stays.
  auto huge = ex.takeScratch(512 * mib);
  char* const hugePtr = huge.ptr;
  ex.giveScratch(huge);
  auto next = ex.takeScratch(16 * mib);
  EXPECT_EQ(next.ptr, bigPtr);
  EXPECT_NE(next.ptr, hugePtr);
  ex.giveScratch(next);
}

TEST_F(Select, OneNameForcesEveryCollectiveThatHasIt) {
  ScopedEnv algo("XCCL_ALGO", "direct");
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "direct");
  EXPECT_EQ(pick(CollType::kBroadcast, 1 << 20), "direct");
  EXPECT_EQ(pick(CollType::kAllGather, 1 << 20), "direct");
  EXPECT_EQ(pick(CollType::kAllToAll, 1 << 20), "pairwise");  // has no "direct": automatic
}

TEST_F(Select, PerCollectiveSpec) {
  ScopedEnv algo("XCCL_ALGO", "allreduce=ring, Reduce_Scatter=direct");
  EXPECT_EQ(pick(CollType::kAllReduce, 1), "ring");
  EXPECT_EQ(pick(CollType::kReduceScatter, 1 << 20), "direct");
  EXPECT_EQ(pick(CollType::kBroadcast, 1 << 20), "chain");  // not named: automatic
}

TEST_F(Select, BadSpecsAreUsageErrors) {
  for (const char* spec : {"allreduce=bogus", "bogus", "nosuchcoll=ring", "ring,direct"}) {
    ScopedEnv algo("XCCL_ALGO", spec);
    try {
      pick(CollType::kAllReduce, 1);
      ADD_FAILURE() << "XCCL_ALGO=" << spec << " was accepted";
    } catch (const xccl::InvalidUsage& e) {
      EXPECT_NE(std::string(e.what()).find("XCCL_ALGO"), std::string::npos) << e.what();
    }
  }
}

TEST_F(Select, ForcedAlgorithmThatDeclinesIsAUsageErrorNamingIt) {
  ScopedEnv algo("XCCL_ALGO", "allreduce=direct");
  ScopedEnv cap("XCCL_DIRECT_TEMP_MAX", "65536");
  EXPECT_EQ(pick(CollType::kAllReduce, 1024), "direct");  // 4 ranks x 4 KiB fits
  try {
    pick(CollType::kAllReduce, 1 << 20);
    ADD_FAILURE() << "direct accepted a call above its temporary cap";
  } catch (const xccl::InvalidUsage& e) {
    EXPECT_NE(std::string(e.what()).find("'direct'"), std::string::npos) << e.what();
  }
}

TEST_F(Select, DecliningAlgorithmFallsBackWhenNotForced) {
  ScopedEnv algo("XCCL_ALGO", nullptr);
  ScopedEnv cap("XCCL_DIRECT_TEMP_MAX", "1024");
  ScopedEnv max("XCCL_ALLREDUCE_DIRECT_MAX", "1000000000");
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1 << 20), "ring");
  ScopedEnv noReads("XCCL_PEER_READ", "0");
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "ring");
}

// "mapped" is tried first on one host above the slots' size (8 KiB here); not across hosts,
// nor without reads in place (XCCL_PEER_READ=0, XCCL_CHECKSUM=1).
TEST_F(Select, MappedAboveTheSlotsOnOneHost) {
  ScopedEnv algo("XCCL_ALGO", nullptr);
  EXPECT_EQ(pick(CollType::kAllReduce, 2048), "slot");  // 8 KiB
  EXPECT_EQ(pick(CollType::kAllReduce, 2049), "mapped");
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 2049), "direct");
  EXPECT_EQ(pick(CollType::kAllReduce, (512 << 10) / 4), "mapped");
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, (512 << 10) / 4), "ring");
  {
    ScopedEnv slots("XCCL_SLOT_MAX", "1024");
    EXPECT_EQ(pick(CollType::kAllReduce, 256), "slot");
    EXPECT_EQ(pick(CollType::kAllReduce, 257), "mapped");
  }
  {
    // Slots of 64 KiB (an oversubscribed host): mapped goes before them above 16 KiB, and
    // when it cannot map every buffer the slots take the call.
    ScopedEnv slots("XCCL_SLOT_MAX", "65536");
    EXPECT_EQ(pick(CollType::kAllReduce, 4096), "slot");
    EXPECT_EQ(pick(CollType::kAllReduce, 4097), "mapped");
    EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 4097), "slot");
    EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 16384), "slot");
  }
  {
    ScopedEnv sums("XCCL_CHECKSUM", "1");
    EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "ring");
  }
  {
    ScopedEnv forced("XCCL_ALGO", "allreduce=mapped");
    EXPECT_EQ(pick(CollType::kAllReduce, 3), "mapped");  // forced: any size
  }
  hosts_ = {{0, 1}, {2, 3}};
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "hierarchical");
  ScopedEnv forced("XCCL_ALGO", "allreduce=mapped");
  EXPECT_THROW(pick(CollType::kAllReduce, 1 << 20), xccl::InvalidUsage);  // two hosts
}

}  // namespace

namespace {

// The documented choice across hosts (select.cc): hierarchical for large allreduce when the
// hosts are alike, twolevel for small ones from XCCL_TWOLEVEL_MIN_HOSTS hosts on.
TEST_F(Select, AllreduceAcrossHostsFollowsTheTopology) {
  ScopedEnv algo("XCCL_ALGO", nullptr);
  ScopedEnv max("XCCL_ALLREDUCE_DIRECT_MAX", "4096");
  hosts_ = {{0, 1}, {2, 3}};
  EXPECT_EQ(pick(CollType::kAllReduce, 1024), "direct");  // 2 hosts: below the twolevel minimum
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "hierarchical");  // 4 MiB
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 18), "ring");  // 1 MiB: below XCCL_HIERARCHICAL_MIN
  {
    ScopedEnv hmin("XCCL_HIERARCHICAL_MIN", "0");
    EXPECT_EQ(pick(CollType::kAllReduce, 1 << 18), "hierarchical");
  }
  hosts_ = {{0, 1}, {2}, {3}};  // 3 hosts, uneven
  EXPECT_EQ(pick(CollType::kAllReduce, 1024), "twolevel");
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "ring");  // hierarchical declines
  {
    ScopedEnv minHosts("XCCL_TWOLEVEL_MIN_HOSTS", "4");
    EXPECT_EQ(pick(CollType::kAllReduce, 1024), "direct");
  }
  hosts_ = {{0}, {1}, {2}, {3}};  // one rank per host: nothing to gain from levels
  EXPECT_EQ(pick(CollType::kAllReduce, 1024), "direct");
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "ring");
  hosts_ = {{0, 1, 2, 3}};
  EXPECT_EQ(pick(CollType::kAllReduce, 1 << 20), "mapped");
  EXPECT_EQ(pickUnmapped(CollType::kAllReduce, 1 << 20), "ring");
  {
    ScopedEnv forced("XCCL_ALGO", "allreduce=hierarchical");
    EXPECT_THROW(pick(CollType::kAllReduce, 1 << 20), xccl::InvalidUsage);  // one host
  }
}

}  // namespace
