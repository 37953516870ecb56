// XCCL_REPRODUCIBLE=1 (and xcclConfig_t.reproducible): every reduction gives, bit for bit, the
// left fold of the inputs in rank order, ((in0 + in1) + in2) + in3, whatever the size, the
// algorithm the selector takes (direct, ordered, in rounds or not), the transport (SHM, TCP)
// or the hosts the ranks live on. The reference is computed here with plain float32
// arithmetic; the inputs span six decades, so any other order changes many results (the
// last test shows that it does without the knob).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "test_collectives_common.h"
#include "test_util.h"
#include "xccl.h"

namespace {

using xccl_coll_test::ThreadWorld;
using xccl_test::ScopedEnv;

constexpr int kRanks = 4;

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Rank r's element i: a sign, 24 random bits and a power of ten from 1e-3 to 1e3.
float input(int r, size_t i) {
  const uint64_t x = mix(static_cast<uint64_t>(r) * 1000003ULL + i);
  const float m = static_cast<float>(x >> 40) / static_cast<float>(1 << 24);
  const float scale = std::pow(10.0F, static_cast<float>(static_cast<int>(x % 7) - 3));
  return ((x & 1) != 0 ? -1.0F : 1.0F) * m * scale;
}

std::vector<float> inputs(int r, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = input(r, i);
  return v;
}

// Element i of the rank-order fold.
float fold(size_t i) {
  float acc = input(0, i);
  for (int r = 1; r < kRanks; ++r) acc = acc + input(r, i);
  return acc;
}

// Elements of `got` (element offset `first` of the whole) that differ in any bit from the fold.
size_t mismatches(const std::vector<float>& got, size_t first = 0) {
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = fold(first + i);
    if (std::memcmp(&got[i], &want, sizeof want) != 0) ++bad;
  }
  return bad;
}

void check(xcclResult_t r, xcclComm_t c) { xccl_test::check(r, c); }

// Every reduction at each size on `world`, checked against the fold bit for bit.
void expectRankOrderFolds(ThreadWorld& world, const std::vector<size_t>& sizes) {
  world.run([&](int rank, xcclComm_t comm) {
    for (size_t count : sizes) {
      SCOPED_TRACE(testing::Message() << "count " << count << ", rank " << rank);
      std::vector<float> in = inputs(rank, count), out(count, -1.0F);
      check(xcclAllReduce(in.data(), out.data(), count, xcclFloat32, xcclSum, comm, nullptr), comm);
      xccl_coll_test::waitAll(comm);
      EXPECT_EQ(mismatches(out), 0U) << "allreduce";
      check(xcclAllReduce(in.data(), in.data(), count, xcclFloat32, xcclSum, comm, nullptr), comm);
      xccl_coll_test::waitAll(comm);
      EXPECT_EQ(mismatches(in), 0U) << "allreduce in place";

      in = inputs(rank, count);
      std::fill(out.begin(), out.end(), -1.0F);
      check(xcclReduce(in.data(), out.data(), count, xcclFloat32, xcclSum, 2, comm, nullptr), comm);
      xccl_coll_test::waitAll(comm);
      if (rank == 2) EXPECT_EQ(mismatches(out), 0U) << "reduce";

      // reducescatter: rank r gets elements [r * block, (r + 1) * block) of the fold
      const size_t block = count / kRanks;
      std::vector<float> mine(block, -1.0F);
      check(xcclReduceScatter(in.data(), mine.data(), block, xcclFloat32, xcclSum, comm, nullptr),
            comm);
      xccl_coll_test::waitAll(comm);
      EXPECT_EQ(mismatches(mine, rank * block), 0U) << "reducescatter";

      // reducescatterv with uneven blocks: rank r gets (r + 1) / 10 of the buffer
      std::vector<size_t> counts(kRanks), displs(kRanks);
      size_t at = 0;
      for (int r = 0; r < kRanks; ++r) {
        counts[r] = count * static_cast<size_t>(r + 1) / 10;
        displs[r] = at;
        at += counts[r];
      }
      std::vector<float> part(counts[rank], -1.0F);
      check(xcclReduceScatterv(in.data(), part.data(), counts.data(), displs.data(), xcclFloat32,
                               xcclSum, comm, nullptr),
            comm);
      xccl_coll_test::waitAll(comm);
      EXPECT_EQ(mismatches(part, displs[rank]), 0U) << "reducescatterv";
    }
  });
}

const std::vector<size_t>& sizes() {
  static const std::vector<size_t> s = {1, 3, 1000, 65537, 262149};
  return s;
}

std::string oneHost(int) { return ""; }
std::string twoHosts(int r) { return r < 2 ? "host-a" : "host-b"; }            // 2 + 2
std::string threeHosts(int r) { return r == 0 ? "h0" : r < 3 ? "h1" : "h2"; }  // 1 + 2 + 1

struct Layout {
  const char* name;
  std::string (*hostOf)(int);
  const char* shmDisable;
};

class Reproducible : public testing::TestWithParam<Layout> {};

// The automatic choice: direct for small, ordered for large.
TEST_P(Reproducible, EveryReductionIsTheRankOrderFold) {
  ScopedEnv on("XCCL_REPRODUCIBLE", "1");
  ScopedEnv shm("XCCL_SHM_DISABLE", GetParam().shmDisable);
  ThreadWorld world(kRanks, GetParam().hostOf);
  expectRankOrderFolds(world, sizes());
}

// Tiny temporaries: direct declines from 256 elements on, and ordered runs in many rounds.
TEST_P(Reproducible, InRoundsOfASmallTemporaryTheBitsAreTheSame) {
  ScopedEnv on("XCCL_REPRODUCIBLE", "1");
  ScopedEnv shm("XCCL_SHM_DISABLE", GetParam().shmDisable);
  ScopedEnv temp("XCCL_DIRECT_TEMP_MAX", "4096");
  ThreadWorld world(kRanks, GetParam().hostOf);
  expectRankOrderFolds(world, sizes());
}

// The fold as a pipeline between neighbours (the choice from XCCL_FOLDCHAIN_MIN_RANKS ranks
// on, here from 2), in chunks of 1000 floats (and a last shorter one): the same bits.
TEST_P(Reproducible, TheFoldChainGivesTheSameBits) {
  ScopedEnv on("XCCL_REPRODUCIBLE", "1");
  ScopedEnv shm("XCCL_SHM_DISABLE", GetParam().shmDisable);
  ScopedEnv chain("XCCL_FOLDCHAIN_MIN_RANKS", "2");
  ScopedEnv chunk("XCCL_CHAIN_CHUNK", "4000");
  ThreadWorld world(kRanks, GetParam().hostOf);
  expectRankOrderFolds(world, sizes());
}

INSTANTIATE_TEST_SUITE_P(Layouts, Reproducible,
                         testing::Values(Layout{"shm", oneHost, "0"}, Layout{"tcp", oneHost, "1"},
                                         Layout{"two_hosts", twoHosts, "0"},
                                         Layout{"three_hosts", threeHosts, "0"}),
                         [](const testing::TestParamInfo<Layout>& info) {
                           return info.param.name;
                         });

// The config field, without the environment variable, does the same; and the default (no
// knob, no field) does not: the ring's and the hierarchical schedule's orders differ from
// the rank order in many elements (what makes the checks above able to fail).
TEST(ReproducibleConfig, TheConfigFieldTurnsItOnAndTheDefaultDiffers) {
  const size_t count = 262149;
  for (const bool on : {true, false}) {
    SCOPED_TRACE(on ? "config.reproducible = 1" : "default");
    xccl_test::MemoryStore store;
    std::vector<size_t> bad(kRanks, 0);
    xccl_test::runThreads(kRanks, [&](int rank) {
      xcclConfig_t cfg = XCCL_CONFIG_INITIALIZER;
      cfg.reproducible = on ? 1 : 0;
      xcclComm_t comm = nullptr;
      check(xcclCommInitRankStore(&comm, kRanks, rank, store.c(), on ? "on/" : "off/", &cfg),
            nullptr);
      std::vector<float> in = inputs(rank, count), out(count);
      check(xcclAllReduce(in.data(), out.data(), count, xcclFloat32, xcclSum, comm, nullptr), comm);
      xccl_coll_test::waitAll(comm);
      bad[rank] = mismatches(out);
      EXPECT_EQ(xcclCommDestroy(comm), xcclSuccess);
    });
    for (int r = 0; r < kRanks; ++r) {
      if (on) {
        EXPECT_EQ(bad[r], 0U) << "rank " << r;
      } else {
        EXPECT_GT(bad[r], count / 100) << "rank " << r;
      }
    }
  }
}

// A forced algorithm that cannot fold in rank order is refused when the communicator is
// made, naming both knobs; 'ordered' can be forced.
TEST(ReproducibleConfig, ForcingARingIsRefusedAtCreation) {
  ScopedEnv on("XCCL_REPRODUCIBLE", "1");
  {
    ScopedEnv algo("XCCL_ALGO", "allreduce=ring");
    xcclUniqueId id;
    ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
    xcclComm_t comm = nullptr;
    EXPECT_EQ(xcclCommInitRank(&comm, 1, id, 0), xcclInvalidUsage);
    const std::string why = xcclGetLastError(nullptr);
    EXPECT_NE(why.find("XCCL_REPRODUCIBLE"), std::string::npos) << why;
    EXPECT_NE(why.find("'ring'"), std::string::npos) << why;
  }
  ScopedEnv algo("XCCL_ALGO", "allreduce=ordered");
  ThreadWorld world(kRanks);
  expectRankOrderFolds(world, {1000});
}

// The fold chain computes in_r op acc on rank r: the same bits as acc op in_r for sums,
// products and every integer op, not for the floating max and min (max(+0, -0) keeps its
// first operand). So it declines those: forced, the call fails naming it; chosen
// automatically, "ordered" serves them, with +0 and -0 in the inputs.
TEST(ReproducibleConfig, TheFoldChainDeclinesFloatingMaxAndMin) {
  ScopedEnv on("XCCL_REPRODUCIBLE", "1");
  ScopedEnv chain("XCCL_FOLDCHAIN_MIN_RANKS", "2");
  const size_t count = 100000;  // above XCCL_ALLREDUCE_DIRECT_MAX
  {
    ThreadWorld world(kRanks);
    world.run([&](int rank, xcclComm_t comm) {
      // Zeros of alternating signs by rank and element: the rank-order max keeps rank 0's.
      std::vector<float> in(count), out(count, 1.0F);
      for (size_t i = 0; i < count; ++i) in[i] = (i + rank) % 2 != 0 ? -0.0F : 0.0F;
      check(xcclAllReduce(in.data(), out.data(), count, xcclFloat32, xcclMax, comm, nullptr), comm);
      xccl_coll_test::waitAll(comm);
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) {
        float want = (i % 2 != 0) ? -0.0F : 0.0F;
        for (int r = 1; r < kRanks; ++r) {
          const float x = (i + r) % 2 != 0 ? -0.0F : 0.0F;
          want = want < x ? x : want;
        }
        bad += std::memcmp(&out[i], &want, sizeof want) != 0;
      }
      EXPECT_EQ(bad, 0U) << "rank " << rank;
      std::vector<int32_t> a(count, rank), b(count);
      check(xcclAllReduce(a.data(), b.data(), count, xcclInt32, xcclMax, comm, nullptr), comm);
      xccl_coll_test::waitAll(comm);
      EXPECT_EQ(b[count - 1], kRanks - 1);
    });
  }
  ScopedEnv algo("XCCL_ALGO", "allreduce=foldchain");
  ThreadWorld world(kRanks);
  world.run([&](int, xcclComm_t comm) {
    std::vector<float> in(count, 1.0F), out(count);
    xcclResult_t r =
        xcclAllReduce(in.data(), out.data(), count, xcclFloat32, xcclMax, comm, nullptr);
    if (r == xcclSuccess) {  // queued: the failure comes with the operation
      xcclEvent_t ev;
      ASSERT_EQ(xcclEventRecord(&ev, comm), xcclSuccess);
      r = xcclEventWait(&ev, 60000);
    }
    EXPECT_EQ(r, xcclInvalidUsage);
    const std::string why = xcclGetLastError(comm);
    EXPECT_NE(why.find("foldchain"), std::string::npos) << why;
  });
}

}  // namespace
