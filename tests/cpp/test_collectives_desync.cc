// Ranks that disagree on a collective: every class of disagreement (kind, dtype, reduction
// op, root, element count, order of calls), small and large, on two and three ranks, and
// ranks that leave right after their last collective (an orderly exit is never an error).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "test_collectives_common.h"

namespace xccl_coll_test {
namespace {

using Clock = std::chrono::steady_clock;
using xccl_test::check;

xcclResult_t waitResult(xcclComm_t comm) {
  xcclEvent_t ev;
  xcclResult_t r = xcclEventRecord(&ev, comm);
  return r != xcclSuccess ? r : xcclEventWait(&ev, -1);
}

// One disagreement: what rank `r` calls, and the words each side's call is described by.
struct Disagreement {
  const char* name;
  size_t count;  // elements of the agreeing ranks' call
  // Issues rank r's call (the last rank is the one that disagrees).
  std::function<xcclResult_t(int r, bool differs, xcclComm_t, Buf&, Buf&)> issue;
  std::string agreeing, differing;  // describeCall() of each side
};

std::vector<Disagreement> disagreements(size_t n) {
  const std::string N = std::to_string(n), N1 = std::to_string(n + 1);
  auto allreduce = [](xcclDataType_t t, xcclRedOp_t op, size_t count) {
    return [=](int, bool, xcclComm_t c, Buf& in, Buf& out) {
      return xcclAllReduce(in.data(), out.data(), count, t, op, c, nullptr);
    };
  };
  std::vector<Disagreement> v;
  v.push_back({"dtype", n,
               [=](int r, bool d, xcclComm_t c, Buf& in, Buf& out) {
                 return allreduce(d ? xcclInt32 : xcclFloat32, xcclSum, n)(r, d, c, in, out);
               },
               "allreduce(float32, " + N + ", sum)", "allreduce(int32, " + N + ", sum)"});
  v.push_back({"op", n,
               [=](int r, bool d, xcclComm_t c, Buf& in, Buf& out) {
                 return allreduce(xcclFloat32, d ? xcclMax : xcclSum, n)(r, d, c, in, out);
               },
               "allreduce(float32, " + N + ", sum)", "allreduce(float32, " + N + ", max)"});
  v.push_back({"count", n,
               [=](int r, bool d, xcclComm_t c, Buf& in, Buf& out) {
                 return allreduce(xcclFloat32, xcclSum, d ? n + 1 : n)(r, d, c, in, out);
               },
               "allreduce(float32, " + N + ", sum)", "allreduce(float32, " + N1 + ", sum)"});
  v.push_back({"count0", n,
               [=](int r, bool d, xcclComm_t c, Buf& in, Buf& out) {
                 return allreduce(xcclFloat32, xcclSum, d ? 0 : n)(r, d, c, in, out);
               },
               "allreduce(float32, " + N + ", sum)", "allreduce(float32, 0, sum)"});
  v.push_back({"broadcast_root", n,
               [=](int, bool d, xcclComm_t c, Buf& in, Buf& out) {
                 return xcclBroadcast(in.data(), out.data(), n, xcclFloat32, d ? 1 : 0, c, nullptr);
               },
               "broadcast(float32, " + N + ", root 0)", "broadcast(float32, " + N + ", root 1)"});
  v.push_back(
      {"reduce_root", n,
       [=](int, bool d, xcclComm_t c, Buf& in, Buf& out) {
         return xcclReduce(in.data(), out.data(), n, xcclFloat32, xcclSum, d ? 1 : 0, c, nullptr);
       },
       "reduce(float32, " + N + ", sum, root 0)", "reduce(float32, " + N + ", sum, root 1)"});
  v.push_back({"gather_root", n / 4,
               [=](int, bool d, xcclComm_t c, Buf& in, Buf& out) {
                 return xcclGather(in.data(), out.data(), n / 4, xcclFloat32, d ? 1 : 0, c,
                                   nullptr);
               },
               "gather(float32, " + std::to_string(n / 4) + ", root 0)",
               "gather(float32, " + std::to_string(n / 4) + ", root 1)"});
  v.push_back({"kind", n,
               [=](int, bool d, xcclComm_t c, Buf& in, Buf& out) {
                 return d ? xcclBroadcast(in.data(), out.data(), n, xcclFloat32, 0, c, nullptr)
                          : xcclAllReduce(in.data(), out.data(), n, xcclFloat32, xcclSum, c,
                                          nullptr);
               },
               "allreduce(float32, " + N + ", sum)", "broadcast(float32, " + N + ", root 0)"});
  v.push_back({"order", n,
               [=](int, bool d, xcclComm_t c, Buf& in, Buf& out) {
                 // The agreeing ranks: allreduce then broadcast; the other one: the reverse.
                 xcclResult_t r1 =
                     d ? xcclBroadcast(in.data(), out.data(), n, xcclFloat32, 0, c, nullptr)
                       : xcclAllReduce(in.data(), out.data(), n, xcclFloat32, xcclSum, c, nullptr);
                 if (r1 != xcclSuccess) return r1;
                 return d ? xcclAllReduce(in.data(), out.data(), n, xcclFloat32, xcclSum, c,
                                          nullptr)
                          : xcclBroadcast(in.data(), out.data(), n, xcclFloat32, 0, c, nullptr);
               },
               "allreduce(float32, " + N + ", sum)", "broadcast(float32, " + N + ", root 0)"});
  return v;
}

struct Case {
  int nranks;
  size_t count;
};

class Desync : public testing::TestWithParam<Case> {};

// Two ranks: both fail, at once, each naming both calls. Three ranks: the rank that
// disagrees fails naming both calls, and every rank fails by its next call at the latest.
TEST_P(Desync, EveryDisagreementFailsOnEveryRankNamingBothCalls) {
  const Case tc = GetParam();
  for (const Disagreement& d : disagreements(tc.count)) {
    SCOPED_TRACE(d.name);
    ThreadWorld world(tc.nranks, nullptr, /*timeoutMs=*/60000);
    world.run([&](int rank, xcclComm_t comm) {
      const bool differs = rank == tc.nranks - 1;
      Buf in(xcclFloat32, tc.count * tc.nranks + 1), out(xcclFloat32, tc.count * tc.nranks + 1);
      in.fill(1);
      auto t0 = Clock::now();
      xcclResult_t r = d.issue(rank, differs, comm, in, out);
      if (r == xcclSuccess) r = waitResult(comm);
      std::string err = r == xcclSuccess ? "" : xcclGetLastError(comm);
      if (tc.nranks == 2 || differs) {
        ASSERT_NE(r, xcclSuccess) << "rank " << rank << " returned";
        EXPECT_NE(err.find("mismatch"), std::string::npos) << err;
        EXPECT_NE(err.find(d.agreeing), std::string::npos) << err;
        EXPECT_NE(err.find(d.differing), std::string::npos) << err;
      } else if (r == xcclSuccess) {
        r = xcclBarrier(comm, nullptr);
        if (r == xcclSuccess) r = waitResult(comm);
        EXPECT_NE(r, xcclSuccess) << "rank " << rank << " never learned of the disagreement";
      }
      EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20.0)
          << "rank " << rank << " waited for the timeout";
    });
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, Desync, testing::Values(Case{2, 64}, Case{2, 1 << 20}, Case{3, 64}, Case{3, 1 << 20}),
    [](const testing::TestParamInfo<Case>& info) {
      return std::to_string(info.param.nranks) + "ranks_" + std::to_string(info.param.count);
    });

// Over TCP a failing rank's stream to a peer is often in the middle of a frame, where no
// abort frame fits; its note then travels on the heartbeat socket, so every rank that fails
// names the root cause (the mismatch), not only "connection lost". Repeated: it was a race.
TEST(DesyncTcp, EveryRankThatFailsNamesTheMismatch) {
  xccl_test::ScopedEnv tcp("XCCL_SHM_DISABLE", "1");
  const size_t n = 1 << 20;
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    ThreadWorld world(3, nullptr, /*timeoutMs=*/60000);
    world.run([&](int rank, xcclComm_t comm) {
      Buf in(xcclFloat32, n + 1), out(xcclFloat32, n + 1);
      in.fill(1);
      const size_t count = rank == 2 ? n + 1 : n;
      xcclResult_t r =
          xcclAllReduce(in.data(), out.data(), count, xcclFloat32, xcclSum, comm, nullptr);
      if (r == xcclSuccess) r = waitResult(comm);
      if (r == xcclSuccess) {
        r = xcclBarrier(comm, nullptr);
        if (r == xcclSuccess) r = waitResult(comm);
      }
      ASSERT_NE(r, xcclSuccess) << "rank " << rank;
      const std::string err = xcclGetLastError(comm);
      EXPECT_NE(err.find("collective mismatch"), std::string::npos)
          << "rank " << rank << ": " << err;
    });
  }
}

// Point-to-point: a send and its receive that disagree on dtype fail on both sides.
TEST(DesyncP2P, SendAndReceiveOfDifferentDtypesFailNamingBoth) {
  ThreadWorld world(2);
  world.run([&](int rank, xcclComm_t comm) {
    Buf b(xcclFloat32, 16);
    xcclResult_t r = rank == 0 ? xcclSend(b.data(), 16, xcclFloat32, 1, comm, nullptr)
                               : xcclRecv(b.data(), 16, xcclInt32, 0, comm, nullptr);
    if (r == xcclSuccess) r = waitResult(comm);
    if (rank == 1) {
      ASSERT_NE(r, xcclSuccess);
      std::string err = xcclGetLastError(comm);
      EXPECT_NE(err.find("send(float32, 16)"), std::string::npos) << err;
      EXPECT_NE(err.find("recv(int32, 16)"), std::string::npos) << err;
    }
  });
}

// The pattern every training script ends with: collectives, a barrier, destroy, leave at
// once. The peer that leaves first has consumed all it needed and sent all it owed, so the
// others' barrier must succeed however the departure interleaves with their progress.
TEST(OrderlyExit, BarrierThenDestroyNeverFailsThePeers) {
  for (int nranks : {2, 3}) {
    for (int run = 0; run < 100; ++run) {
      SCOPED_TRACE("nranks " + std::to_string(nranks) + " run " + std::to_string(run));
      xccl_test::MemoryStore store;
      std::vector<std::string> failures(nranks);
      std::vector<std::thread> threads;
      for (int rank = 0; rank < nranks; ++rank) {
        threads.emplace_back([&, rank] {
          xcclComm_t comm = nullptr;
          if (xcclCommInitRankStore(&comm, nranks, rank, store.c(), "exit/", nullptr) !=
              xcclSuccess) {
            failures[rank] = "init failed";
            return;
          }
          std::vector<float> buf(1 + (run % 4) * 1000, 1.0f);
          std::mt19937 rng(run * 31 + rank);
          for (int i = 0; i < 20; ++i) {
            xcclAllReduce(buf.data(), buf.data(), buf.size(), xcclFloat32, xcclSum, comm, nullptr);
          }
          xcclResult_t r = xcclBarrier(comm, nullptr);
          if (r == xcclSuccess) r = waitResult(comm);
          if (r != xcclSuccess) failures[rank] = xcclGetLastError(comm);
          // Leave at a random moment right after: destroy closes every connection.
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
          xcclCommDestroy(comm);
        });
      }
      for (auto& t : threads) t.join();
      for (int rank = 0; rank < nranks; ++rank) {
        ASSERT_EQ(failures[rank], "") << "rank " << rank;
      }
    }
  }
}

}  // namespace
}  // namespace xccl_coll_test
