// The bootstrap tree (bootstrap/tree.cc): its shape for every size and fanout, every record
// reaching every rank in rank order through the services, nothing left behind in them, and a
// missing rank failing every other rank, naming it, long before their own deadlines.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/bootstrap/bootstrap_internal.h"
#include "common/error.h"
#include "test_util.h"

namespace {

using xccl::BootstrapTreeNode;
using xccl::Deadline;

TEST(BootstrapTree, RangesPartitionTheRanksAndDepthGrowsWithTheLogOfN) {
  for (int fanout : {1, 2, 3, 8, 64}) {
    for (int n = 1; n <= 300; n += (n < 40 ? 1 : 37)) {
      std::vector<BootstrapTreeNode> nodes;
      for (int r = 0; r < n; ++r) nodes.push_back(xccl::bootstrapTreeNode(n, fanout, r));
      ASSERT_EQ(nodes[0].parent, -1);
      ASSERT_EQ(nodes[0].hi, n);
      int deepest = 0;
      for (int r = 0; r < n; ++r) {
        const BootstrapTreeNode& node = nodes[r];
        SCOPED_TRACE(testing::Message() << "n " << n << " fanout " << fanout << " rank " << r);
        ASSERT_LE(node.children.size(), static_cast<size_t>(fanout));
        int at = r + 1;  // the children's ranges cover [r + 1, hi) in order
        for (const auto& [a, b] : node.children) {
          ASSERT_EQ(a, at);
          ASSERT_LT(a, b);
          EXPECT_EQ(nodes[a].parent, r);
          EXPECT_EQ(nodes[a].hi, b);
          EXPECT_EQ(nodes[a].depth, node.depth + 1);
          at = b;
        }
        ASSERT_EQ(at, node.hi);
        if (r > 0) {
          ASSERT_GE(node.parent, 0);
          ASSERT_LT(node.parent, r);  // a parent heads a range that starts before
        }
        deepest = std::max(deepest, node.depth);
      }
      if (fanout == 1) {
        EXPECT_EQ(deepest, n - 1);  // a chain
      } else if (n > 1) {
        const int bound = static_cast<int>(std::ceil(std::log(n) / std::log(fanout) - 1e-9)) + 1;
        EXPECT_LE(deepest, bound) << "n " << n << " fanout " << fanout;
      }
    }
  }
  // 4096 ranks, 8 children each: 4 levels below rank 0, so 8 round trips.
  int deepest = 0;
  for (int r = 0; r < 4096; ++r)
    deepest = std::max(deepest, xccl::bootstrapTreeNode(4096, 8, r).depth);
  EXPECT_EQ(deepest, 4);
}

std::string recordOf(int rank) {
  return "record of rank " + std::to_string(rank) + std::string(rank % 7, '*');
}

// n ranks as threads of this process: one bootstrap service serves them all, as it would
// serve each process's ranks (the keys are per rank and per initialisation).
void exchange(int n, int fanout, const std::string& scope, const std::function<Deadline(int)>& dl,
              const std::function<bool(int)>& present,
              const std::function<void(int, const std::vector<std::string>*,
                                       const std::string& error, double seconds)>& done) {
  const std::string service = xccl::processService();
  std::atomic<bool> abortFlag{false};
  xccl_test::runThreads(
      n,
      [&](int rank) {
        if (!present(rank)) return;
        const Deadline deadline = dl(rank);
        const auto t0 = std::chrono::steady_clock::now();
        try {
          auto got = xccl::exchangeRecordsByTree(xccl::TreeExchange{rank, n, fanout, recordOf(rank),
                                                                    rank == 0 ? "" : service, scope,
                                                                    deadline, abortFlag, nullptr});
          done(rank, &got, "",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        } catch (const xccl::Error& e) {
          done(rank, nullptr, e.what(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
      },
      90);
}

TEST(BootstrapTree, EveryRankGetsEveryRecordInRankOrderAndTheServiceKeepsNothing) {
  for (int fanout : {1, 2, 3, 8}) {
    const int n = 19;
    const std::string scope = "test-" + xccl::randomSecret().substr(0, 8) + "/";
    std::mutex mu;
    int good = 0;
    exchange(
        n, fanout, scope, [](int) { return Deadline::after(30000); }, [](int) { return true; },
        [&](int rank, const std::vector<std::string>* got, const std::string& error, double) {
          std::lock_guard<std::mutex> g(mu);
          ASSERT_NE(got, nullptr) << "rank " << rank << ": " << error;
          ASSERT_EQ(got->size(), static_cast<size_t>(n));
          for (int r = 0; r < n; ++r) EXPECT_EQ((*got)[r], recordOf(r)) << "rank " << rank;
          ++good;
        });
    EXPECT_EQ(good, n) << "fanout " << fanout;
    // Every key was taken by its reader: nothing stays in the process-long service.
    auto svc = xccl::connectService(xccl::processService(), Deadline::after(5000));
    for (int r = 0; r < n; ++r) {
      for (const char* dir : {"up", "down"}) {
        const std::string key = scope + "tree/" + dir + "/" + std::to_string(r);
        EXPECT_THROW(svc->get(key, Deadline::after(0)), xccl::Timeout) << key << " left behind";
      }
    }
  }
}

// The deepest leaf never comes. Its parent waits out a short deadline; every other rank has
// 60 s, and must hear of it through the tree (up to rank 0, then down) within seconds.
TEST(BootstrapTree, AMissingRankFailsEveryOtherRankNamingItLongBeforeTheirDeadlines) {
  const int n = 12, fanout = 2;
  int missing = 0;
  for (int r = 0; r < n; ++r) {
    const auto node = xccl::bootstrapTreeNode(n, fanout, r);
    if (node.children.empty() && node.depth >= xccl::bootstrapTreeNode(n, fanout, missing).depth)
      missing = r;
  }
  const int parent = xccl::bootstrapTreeNode(n, fanout, missing).parent;
  ASSERT_GE(xccl::bootstrapTreeNode(n, fanout, missing).depth, 3);
  const std::string scope = "test-" + xccl::randomSecret().substr(0, 8) + "/";
  std::mutex mu;
  int failed = 0;
  exchange(
      n, fanout, scope, [&](int rank) { return Deadline::after(rank == parent ? 1500 : 60000); },
      [&](int rank) { return rank != missing; },
      [&](int rank, const std::vector<std::string>* got, const std::string& error, double s) {
        std::lock_guard<std::mutex> g(mu);
        ASSERT_EQ(got, nullptr) << "rank " << rank << " got a list without rank " << missing;
        EXPECT_NE(error.find("rank " + std::to_string(missing) + "'s record"), std::string::npos)
            << "rank " << rank << ": " << error;
        EXPECT_LT(s, 10.0) << "rank " << rank << " heard after " << s << " s: " << error;
        ++failed;
      });
  EXPECT_EQ(failed, n - 1);
}

}  // namespace
