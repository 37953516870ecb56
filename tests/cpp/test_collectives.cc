// Collectives through the public C API, ranks as threads, for every world size and every
// algorithm forced in turn (XCCL_ALGO), plus the automatic choice:
//
//   Coll/<n>ranks_<algo>[_2hosts]   n in {1,2,3,4,7,8}; algo in {auto, ring, direct, chain};
//                                   2hosts: ranks alternate between two fake hosts, so the
//                                   ring order is not rank order and half the links are TCP.
//
// Each test enqueues a batch of operations per rank (every dtype x op where the collective
// reduces; counts 0, 1 and odd; in-place and out-of-place), waits once with an event, then
// checks every result against a host reference. Large messages (>= 4 MiB) run on a few
// world sizes only, to keep the suite fast on two cores.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "test_collectives_common.h"

namespace xccl_coll_test {
namespace {

using xccl_test::check;

struct WorldParam {
  int n;
  std::string algo;  // XCCL_ALGO value; "" = automatic
  int hosts;         // ranks r, r + hosts, ... share a (fake) host
  std::string knob;  // "" or one more "XCCL_NAME=value" for the test ("_knob" in its name)
};
void PrintTo(const WorldParam& p, std::ostream* os) {
  *os << p.n << " ranks, XCCL_ALGO=" << p.algo << ", " << p.hosts << " host(s)"
      << (p.knob.empty() ? "" : ", " + p.knob);
}

std::string paramName(const ::testing::TestParamInfo<WorldParam>& info) {
  return std::to_string(info.param.n) + "ranks_" +
         (info.param.algo.empty() ? "auto" : info.param.algo) +
         (info.param.hosts > 1 ? "_" + std::to_string(info.param.hosts) + "hosts" : "") +
         (info.param.knob.empty() ? "" : "_knob");
}

// One operation of a rank's batch: enqueue() issues it, verify() checks its result.
struct Op {
  std::string name;
  std::function<void()> enqueue;
  std::function<void()> verify;
};

class Coll : public ::testing::TestWithParam<WorldParam> {
 protected:
  void SetUp() override {
    const WorldParam& p = GetParam();
    algoEnv_ = std::make_unique<xccl_test::ScopedEnv>("XCCL_ALGO",
                                                      p.algo.empty() ? nullptr : p.algo.c_str());
    if (!p.knob.empty()) {
      const size_t eq = p.knob.find('=');
      knobEnv_ = std::make_unique<xccl_test::ScopedEnv>(p.knob.substr(0, eq).c_str(),
                                                        p.knob.substr(eq + 1).c_str());
    }
    std::function<std::string(int)> hostOf;
    const int hosts = p.hosts;
    if (hosts > 1)
      hostOf = [hosts](int r) { return std::string("fakehost") + char('A' + r % hosts); };
    world_ = std::make_unique<ThreadWorld>(p.n, hostOf);
  }
  void TearDown() override {
    world_.reset();
    algoEnv_.reset();
  }
  int n() const { return GetParam().n; }
  bool large() const { return n() >= 2; }

  // Builds each rank's batch with makeOps(rank, comm, ops), enqueues all, waits, verifies.
  void runBatch(const std::function<void(int, xcclComm_t, std::vector<Op>&)>& makeOps) {
    world_->run([&](int rank, xcclComm_t comm) {
      std::vector<Op> ops;
      makeOps(rank, comm, ops);
      for (Op& op : ops) {
        SCOPED_TRACE(op.name);
        op.enqueue();
      }
      waitAll(comm);
      for (Op& op : ops) {
        SCOPED_TRACE("rank " + std::to_string(rank) + " " + op.name);
        op.verify();
      }
    });
  }

  std::unique_ptr<xccl_test::ScopedEnv> algoEnv_;
  std::unique_ptr<xccl_test::ScopedEnv> knobEnv_;
  std::unique_ptr<ThreadWorld> world_;
};

std::string opLabel(const char* coll, xcclDataType_t t, xcclRedOp_t op, size_t count, bool inPlace,
                    int root = -1) {
  std::string s = std::string(coll) + " " + xcclTypeName(t) + " " + xcclOpName(op) + " count " +
                  std::to_string(count) + (inPlace ? " in-place" : " out-of-place");
  if (root >= 0) s += " root " + std::to_string(root);
  return s;
}

xcclResult_t allReduce(const void* s, void* r, size_t count, xcclDataType_t t, xcclRedOp_t op,
                       xcclComm_t comm) {
  if (op == xcclPremulSum) {
    unsigned char scalar[8];
    store(scalar, 0, t, premulScalar(t));
    return xcclAllReducePremulSum(s, r, count, t, scalar, comm, nullptr);
  }
  return xcclAllReduce(s, r, count, t, op, comm, nullptr);
}

// ---- allreduce: every dtype x op, counts 0 / 1 / odd, in-place and out-of-place; every rank
// must end with bit-identical results ----
TEST_P(Coll, AllReduce) {
  const int n = this->n();
  std::vector<std::vector<std::shared_ptr<Buf>>> results(n);
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    for (xcclDataType_t t : allTypes()) {
      for (xcclRedOp_t op : allOps()) {
        if (!supported(t, op)) continue;
        for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
          for (bool inPlace : {false, true}) {
            auto send = std::make_shared<Buf>(t, count);
            auto recv = inPlace ? send : std::make_shared<Buf>(t, count);
            for (size_t i = 0; i < count; ++i) send->set(i, reduceInput(op, t, rank, i));
            if (!inPlace) recv->fill(99);
            results[rank].push_back(recv);
            ops.push_back(
                {opLabel("allreduce", t, op, count, inPlace),
                 [=] { check(allReduce(send->data(), recv->data(), count, t, op, comm), comm); },
                 [=] {
                   expectMatches(
                       *recv, 0, count, [&](size_t i) { return reduceExpected(op, t, n, i); },
                       "allreduce");
                 }});
          }
        }
      }
    }
  });
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(results[r].size(), results[0].size());
    for (size_t k = 0; k < results[0].size(); ++k) {
      EXPECT_EQ(results[r][k]->bytes, results[0][k]->bytes)
          << "allreduce result #" << k << " differs between rank 0 and rank " << r;
    }
  }
}

// ---- reduce: every dtype x op, result at the root only; other ranks' recvbuf untouched ----
TEST_P(Coll, Reduce) {
  const int n = this->n();
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    int k = 0;
    for (xcclDataType_t t : allTypes()) {
      for (xcclRedOp_t op : allOps()) {
        if (!supported(t, op) || op == xcclPremulSum) continue;
        for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
          const int root = (k++) % n;
          const bool inPlace = k % 2 == 0;
          auto send = std::make_shared<Buf>(t, count);
          auto recv = inPlace ? send : std::make_shared<Buf>(t, count);
          for (size_t i = 0; i < count; ++i) send->set(i, reduceInput(op, t, rank, i));
          if (!inPlace) recv->fill(7);
          ops.push_back(
              {opLabel("reduce", t, op, count, inPlace, root),
               [=] {
                 check(xcclReduce(send->data(), recv->data(), count, t, op, root, comm, nullptr),
                       comm);
               },
               [=] {
                 if (rank == root) {
                   expectMatches(
                       *recv, 0, count, [&](size_t i) { return reduceExpected(op, t, n, i); },
                       "reduce at root");
                 } else if (inPlace) {
                   expectMatches(
                       *recv, 0, count, [&](size_t i) { return reduceInput(op, t, rank, i); },
                       "reduce: non-root in-place buffer must be untouched");
                 } else {
                   expectMatches(
                       *recv, 0, count, [&](size_t) { return roundTo(t, 7); },
                       "reduce: non-root recvbuf must be untouched");
                 }
               }});
        }
      }
    }
  });
}

// ---- reduce-scatter: every dtype x op; rank r gets block r ----
TEST_P(Coll, ReduceScatter) {
  const int n = this->n();
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    int k = 0;
    for (xcclDataType_t t : allTypes()) {
      for (xcclRedOp_t op : allOps()) {
        if (!supported(t, op) || op == xcclPremulSum) continue;
        for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
          const bool inPlace = (k++) % 2 == 0;
          auto send = std::make_shared<Buf>(t, count * n);
          for (size_t j = 0; j < count * n; ++j) send->set(j, reduceInput(op, t, rank, j));
          auto recv = std::make_shared<Buf>(t, count);
          recv->fill(5);
          void* recvPtr = inPlace
                              ? static_cast<char*>(send->data()) + rank * count * xcclTypeSize(t)
                              : recv->data();
          ops.push_back(
              {opLabel("reducescatter", t, op, count, inPlace),
               [=] {
                 check(xcclReduceScatter(send->data(), recvPtr, count, t, op, comm, nullptr), comm);
               },
               [=] {
                 const Buf& out = inPlace ? *send : *recv;
                 size_t first = inPlace ? rank * count : 0;
                 expectMatches(
                     out, first, count,
                     [&](size_t i) { return reduceExpected(op, t, n, rank * count + i); },
                     "reducescatter");
               }});
        }
      }
    }
  });
}

// ---- broadcast: every dtype, counts 0 / 1 / odd, first and last root, both placements ----
TEST_P(Coll, Broadcast) {
  const int n = this->n();
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    for (xcclDataType_t t : allTypes()) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
        for (int root : {0, n - 1}) {
          for (bool inPlace : {false, true}) {
            auto send = std::make_shared<Buf>(t, count);
            auto recv = inPlace ? send : std::make_shared<Buf>(t, count);
            for (size_t i = 0; i < count; ++i) send->set(i, pattern(rank, i, t));
            if (!inPlace) recv->fill(3);
            ops.push_back(
                {opLabel("broadcast", t, xcclSum, count, inPlace, root),
                 [=] {
                   check(xcclBroadcast(send->data(), recv->data(), count, t, root, comm, nullptr),
                         comm);
                 },
                 [=] {
                   expectMatches(
                       *recv, 0, count, [&](size_t i) { return pattern(root, i, t); }, "broadcast");
                 }});
          }
        }
      }
    }
  });
}

// ---- allgather: every dtype; in-place means sendbuf == recvbuf + rank * block ----
TEST_P(Coll, AllGather) {
  const int n = this->n();
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    for (xcclDataType_t t : allTypes()) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
        for (bool inPlace : {false, true}) {
          auto recv = std::make_shared<Buf>(t, count * n);
          auto send = std::make_shared<Buf>(t, count);
          recv->fill(1);
          for (size_t i = 0; i < count; ++i) {
            (inPlace ? recv->set(rank * count + i, pattern(rank, i, t))
                     : send->set(i, pattern(rank, i, t)));
          }
          const void* sendPtr =
              inPlace ? static_cast<char*>(recv->data()) + rank * count * xcclTypeSize(t)
                      : send->data();
          ops.push_back(
              {opLabel("allgather", t, xcclSum, count, inPlace),
               [=] {
                 (void)send;  // keeps the out-of-place send buffer alive
                 check(xcclAllGather(sendPtr, recv->data(), count, t, comm, nullptr), comm);
               },
               [=] {
                 expectMatches(
                     *recv, 0, count * n,
                     [&](size_t j) { return pattern(static_cast<int>(j / count), j % count, t); },
                     "allgather");
               }});
        }
      }
    }
  });
}

// ---- alltoall: block j of my sendbuf goes to rank j ----
TEST_P(Coll, AllToAll) {
  const int n = this->n();
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    for (xcclDataType_t t : {xcclFloat32, xcclInt8, xcclBfloat16, xcclInt64}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
        auto send = std::make_shared<Buf>(t, count * n);
        auto recv = std::make_shared<Buf>(t, count * n);
        // element i of the block for rank j: pattern(rank, j * count + i)
        for (size_t j = 0; j < count * n; ++j) send->set(j, pattern(rank, j, t));
        recv->fill(2);
        ops.push_back({opLabel("alltoall", t, xcclSum, count, false),
                       [=] {
                         check(xcclAllToAll(send->data(), recv->data(), count, t, comm, nullptr),
                               comm);
                       },
                       [=] {
                         expectMatches(
                             *recv, 0, count * n,
                             [&](size_t j) {
                               int from = static_cast<int>(j / count);
                               return pattern(from, rank * count + j % count, t);
                             },
                             "alltoall");
                       }});
      }
    }
  });
}

// Elements rank `from` sends to rank `to` in the alltoallv test (zero for some pairs).
size_t vcount(int from, int to, size_t scale) { return ((from * 3 + to * 5) % 7) * scale; }

// ---- alltoallv: uneven counts (some zero), displacements with gaps ----
TEST_P(Coll, AllToAllv) {
  const int n = this->n();
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    for (size_t scale : {size_t{1}, size_t{37}}) {
      auto sc = std::make_shared<std::vector<size_t>>(n),
           sd = std::make_shared<std::vector<size_t>>(n);
      auto rc = std::make_shared<std::vector<size_t>>(n),
           rd = std::make_shared<std::vector<size_t>>(n);
      size_t sendTotal = 0, recvTotal = 0;
      for (int j = 0; j < n; ++j) {
        (*sc)[j] = vcount(rank, j, scale);
        (*sd)[j] = sendTotal + 3;  // a gap before each block
        sendTotal += (*sc)[j] + 3;
        (*rc)[j] = vcount(j, rank, scale);
        (*rd)[j] = recvTotal + 2;
        recvTotal += (*rc)[j] + 2;
      }
      const xcclDataType_t t = xcclInt32;
      auto send = std::make_shared<Buf>(t, sendTotal), recv = std::make_shared<Buf>(t, recvTotal);
      send->fill(-1);
      recv->fill(-7);
      for (int j = 0; j < n; ++j) {
        for (size_t i = 0; i < (*sc)[j]; ++i) send->set((*sd)[j] + i, rank * 100000 + j * 1000 + i);
      }
      ops.push_back({"alltoallv scale " + std::to_string(scale),
                     [=] {
                       check(xcclAllToAllv(send->data(), sc->data(), sd->data(), recv->data(),
                                           rc->data(), rd->data(), t, comm, nullptr),
                             comm);
                     },
                     [=] {
                       for (int j = 0; j < n; ++j) {
                         expectMatches(
                             *recv, (*rd)[j], (*rc)[j],
                             [&](size_t i) { return j * 100000.0 + rank * 1000 + i; },
                             "alltoallv block from rank " + std::to_string(j));
                         if ((*rd)[j] > 0) EXPECT_EQ(recv->get((*rd)[j] - 1), -7) << "gap written";
                       }
                     }});
    }
  });
}

// ---- gather and scatter: first and last root, both placements ----
TEST_P(Coll, GatherScatter) {
  const int n = this->n();
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    for (xcclDataType_t t : {xcclFloat32, xcclUint8, xcclFloat16}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
        for (int root : {0, n - 1}) {
          for (bool inPlace : {false, true}) {
            const size_t block = count * xcclTypeSize(t);
            // gather
            auto gRecv = std::make_shared<Buf>(t, count * n),
                 gSend = std::make_shared<Buf>(t, count);
            gRecv->fill(4);
            const bool gInPlace = inPlace && rank == root;
            for (size_t i = 0; i < count; ++i) {
              gInPlace ? gRecv->set(rank * count + i, pattern(rank, i, t))
                       : gSend->set(i, pattern(rank, i, t));
            }
            const void* gSendPtr =
                gInPlace ? static_cast<char*>(gRecv->data()) + rank * block : gSend->data();
            ops.push_back(
                {opLabel("gather", t, xcclSum, count, inPlace, root),
                 [=] {
                   (void)gSend;  // keeps the out-of-place send buffer alive
                   check(xcclGather(gSendPtr, gRecv->data(), count, t, root, comm, nullptr), comm);
                 },
                 [=] {
                   if (rank != root) {
                     expectMatches(
                         *gRecv, 0, count * n, [&](size_t) { return roundTo(t, 4); },
                         "gather: non-root recvbuf untouched");
                     return;
                   }
                   expectMatches(
                       *gRecv, 0, count * n,
                       [&](size_t j) { return pattern(static_cast<int>(j / count), j % count, t); },
                       "gather at root");
                 }});
            // scatter
            auto sSend = std::make_shared<Buf>(t, count * n),
                 sRecv = std::make_shared<Buf>(t, count);
            for (size_t j = 0; j < count * n; ++j) sSend->set(j, pattern(rank, j, t));
            sRecv->fill(6);
            const bool sInPlace = inPlace && rank == root;
            void* sRecvPtr =
                sInPlace ? static_cast<char*>(sSend->data()) + rank * block : sRecv->data();
            ops.push_back(
                {opLabel("scatter", t, xcclSum, count, inPlace, root),
                 [=] {
                   (void)sRecv;  // keeps the out-of-place recv buffer alive
                   check(xcclScatter(sSend->data(), sRecvPtr, count, t, root, comm, nullptr), comm);
                 },
                 [=] {
                   expectMatches(
                       sInPlace ? *sSend : *sRecv, sInPlace ? rank * count : 0, count,
                       [&](size_t i) { return pattern(root, rank * count + i, t); }, "scatter");
                 }});
          }
        }
      }
    }
  });
}

// ---- send/recv around the ring inside a group, and with explicit peers (no group) ----
TEST_P(Coll, SendRecv) {
  const int n = this->n();
  if (n == 1) GTEST_SKIP() << "no peer to send to";
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
      const xcclDataType_t t = xcclFloat64;
      auto send = std::make_shared<Buf>(t, count), recv = std::make_shared<Buf>(t, count);
      for (size_t i = 0; i < count; ++i) send->set(i, pattern(rank, i, t));
      recv->fill(8);
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      ops.push_back({"sendrecv ring count " + std::to_string(count),
                     [=] {
                       check(xcclGroupStart());
                       check(xcclSend(send->data(), count, t, next, comm, nullptr), comm);
                       check(xcclRecv(recv->data(), count, t, prev, comm, nullptr), comm);
                       check(xcclGroupEnd());
                     },
                     [=] {
                       expectMatches(
                           *recv, 0, count, [&](size_t i) { return pattern(prev, i, t); },
                           "recv from prev");
                     }});
    }
  });
}

// ---- barrier: nobody leaves before everybody has arrived ----
TEST_P(Coll, Barrier) {
  const int n = this->n();
  std::atomic<int> arrived{0};
  world_->run([&](int rank, xcclComm_t comm) {
    for (int round = 1; round <= 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rank == round % n ? 30 : 0));
      arrived.fetch_add(1);
      check(xcclBarrier(comm, nullptr), comm);
      waitAll(comm);
      EXPECT_GE(arrived.load(), round * n)
          << "rank " << rank << " left barrier " << round << " before every rank arrived";
      // Second barrier so nobody starts the next round's increment before all have checked.
      check(xcclBarrier(comm, nullptr), comm);
      waitAll(comm);
    }
  });
}

// ---- large messages (>= 4 MiB of float32) on a few world sizes ----
TEST_P(Coll, LargeFloat32) {
  const int n = this->n();
  if (!large()) GTEST_SKIP() << "one rank: nothing moves";
  const size_t count = (size_t{1} << 20) + 3;  // 4 MiB + 12 bytes: uneven blocks
  const size_t per = count / n + 1;            // per-rank block for gather-like collectives
  const xcclDataType_t t = xcclFloat32;
  std::vector<std::shared_ptr<Buf>> allreduceOut(n);
  // Expected values, computed once (every rank checks against the same vectors).
  std::vector<double> expSum(std::max(count, per * n)), expAvg(count), expMax(count);
  for (size_t i = 0; i < expSum.size(); ++i) expSum[i] = reduceExpected(xcclSum, t, n, i);
  for (size_t i = 0; i < count; ++i) expAvg[i] = reduceExpected(xcclAvg, t, n, i);
  for (size_t i = 0; i < count; ++i) expMax[i] = reduceExpected(xcclMax, t, n, i);
  const std::vector<double>* eSum = &expSum;
  const std::vector<double>* eAvg = &expAvg;
  const std::vector<double>* eMax = &expMax;
  runBatch([&](int rank, xcclComm_t comm, std::vector<Op>& ops) {
    auto arIn = std::make_shared<Buf>(t, count), arOut = std::make_shared<Buf>(t, count);
    for (size_t i = 0; i < count; ++i) arIn->set(i, reduceInput(xcclSum, t, rank, i));
    allreduceOut[rank] = arOut;
    ops.push_back(
        {"allreduce large",
         [=] {
           check(xcclAllReduce(arIn->data(), arOut->data(), count, t, xcclSum, comm, nullptr),
                 comm);
         },
         [=] {
           expectMatches(
               *arOut, 0, count, [&](size_t i) { return (*eSum)[i]; }, "allreduce large");
         }});
    auto ip = std::make_shared<Buf>(t, count);  // in-place avg
    for (size_t i = 0; i < count; ++i) ip->set(i, reduceInput(xcclAvg, t, rank, i));
    ops.push_back(
        {"allreduce large in-place avg",
         [=] {
           check(xcclAllReduce(ip->data(), ip->data(), count, t, xcclAvg, comm, nullptr), comm);
         },
         [=] {
           expectMatches(
               *ip, 0, count, [&](size_t i) { return (*eAvg)[i]; }, "allreduce large avg");
         }});
    const int root = n - 1;
    auto bc = std::make_shared<Buf>(t, count);
    for (size_t i = 0; i < count; ++i) bc->set(i, rank == root ? pattern(root, i, t) : 0);
    ops.push_back(
        {"broadcast large",
         [=] { check(xcclBroadcast(bc->data(), bc->data(), count, t, root, comm, nullptr), comm); },
         [=] {
           expectMatches(
               *bc, 0, count, [&](size_t i) { return pattern(root, i, t); }, "broadcast large");
         }});
    auto rdIn = std::make_shared<Buf>(t, count), rdOut = std::make_shared<Buf>(t, count);
    for (size_t i = 0; i < count; ++i) rdIn->set(i, reduceInput(xcclMax, t, rank, i));
    ops.push_back(
        {"reduce large max",
         [=] {
           check(xcclReduce(rdIn->data(), rdOut->data(), count, t, xcclMax, 0, comm, nullptr),
                 comm);
         },
         [=] {
           if (rank == 0) {
             expectMatches(
                 *rdOut, 0, count, [&](size_t i) { return (*eMax)[i]; }, "reduce large");
           }
         }});
    auto agIn = std::make_shared<Buf>(t, per), agOut = std::make_shared<Buf>(t, per * n);
    for (size_t i = 0; i < per; ++i) agIn->set(i, pattern(rank, i, t));
    ops.push_back(
        {"allgather large",
         [=] { check(xcclAllGather(agIn->data(), agOut->data(), per, t, comm, nullptr), comm); },
         [=] {
           expectMatches(
               *agOut, 0, per * n,
               [&](size_t j) { return pattern(static_cast<int>(j / per), j % per, t); },
               "allgather large");
         }});
    auto rsIn = std::make_shared<Buf>(t, per * n), rsOut = std::make_shared<Buf>(t, per);
    for (size_t j = 0; j < per * n; ++j) rsIn->set(j, reduceInput(xcclSum, t, rank, j));
    ops.push_back(
        {"reducescatter large",
         [=] {
           check(xcclReduceScatter(rsIn->data(), rsOut->data(), per, t, xcclSum, comm, nullptr),
                 comm);
         },
         [=] {
           expectMatches(
               *rsOut, 0, per, [&](size_t i) { return (*eSum)[rank * per + i]; },
               "reducescatter large");
         }});
    auto aaIn = std::make_shared<Buf>(t, per * n), aaOut = std::make_shared<Buf>(t, per * n);
    for (size_t j = 0; j < per * n; ++j) aaIn->set(j, pattern(rank, j, t));
    ops.push_back(
        {"alltoall large",
         [=] { check(xcclAllToAll(aaIn->data(), aaOut->data(), per, t, comm, nullptr), comm); },
         [=] {
           expectMatches(
               *aaOut, 0, per * n,
               [&](size_t j) {
                 return pattern(static_cast<int>(j / per), rank * per + j % per, t);
               },
               "alltoall large");
         }});
  });
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(allreduceOut[r]->bytes, allreduceOut[0]->bytes)
        << "rank " << r << " differs from rank 0";
  }
}

// Slices and chunks that do not divide the element size or the blocks: the sender and the
// receiver must cut every message at the same element boundaries.
TEST(CollSlicing, OddSliceAndChunkSizes) {
  xccl_test::ScopedEnv slice("XCCL_RING_SLICE", "1000");
  xccl_test::ScopedEnv chunk("XCCL_CHAIN_CHUNK", "999");
  xccl_test::ScopedEnv algo("XCCL_ALGO", "allreduce=ring,broadcast=chain,reduce=chain");
  const int n = 3;
  ThreadWorld world(n);
  world.run([&](int rank, xcclComm_t comm) {
    for (xcclDataType_t t : {xcclFloat64, xcclInt8, xcclBfloat16}) {
      for (size_t count : {size_t{5}, size_t{1001}, size_t{100003}}) {
        std::string tag = std::string(xcclTypeName(t)) + " count " + std::to_string(count);
        Buf ar(t, count), bc(t, count), rdIn(t, count), rdOut(t, count);
        for (size_t i = 0; i < count; ++i) {
          ar.set(i, reduceInput(xcclSum, t, rank, i));
          bc.set(i, rank == 2 ? pattern(2, i, t) : 0);
          rdIn.set(i, reduceInput(xcclMin, t, rank, i));
        }
        check(xcclAllReduce(ar.data(), ar.data(), count, t, xcclSum, comm, nullptr), comm);
        check(xcclBroadcast(bc.data(), bc.data(), count, t, 2, comm, nullptr), comm);
        check(xcclReduce(rdIn.data(), rdOut.data(), count, t, xcclMin, 1, comm, nullptr), comm);
        waitAll(comm);
        expectMatches(
            ar, 0, count, [&](size_t i) { return reduceExpected(xcclSum, t, n, i); },
            "allreduce ring " + tag);
        expectMatches(
            bc, 0, count, [&](size_t i) { return pattern(2, i, t); }, "broadcast chain " + tag);
        if (rank == 1) {
          expectMatches(
              rdOut, 0, count, [&](size_t i) { return reduceExpected(xcclMin, t, n, i); },
              "reduce chain " + tag);
        }
      }
    }
  });
}

std::vector<WorldParam> worlds() {
  std::vector<WorldParam> v;
  for (int n : {1, 2, 3, 4, 7, 8}) {
    for (const char* algo : {"", "ring", "direct", "chain"}) v.push_back({n, algo, 1});
  }
  // Ring order != rank order (ranks alternate between two hosts): ring indexing and TCP.
  for (int n : {3, 4, 7}) {
    for (const char* algo : {"ring", "chain"}) v.push_back({n, algo, 2});
  }
  // Across hosts: hierarchical (hosts alike) and twolevel (any), and automatic choice.
  v.push_back({4, "hierarchical", 2});
  v.push_back({6, "hierarchical", 3});
  v.push_back({8, "hierarchical", 2});
  // Its step across hosts as Rabenseifner's (XCCL_HIERARCHICAL_LOG_MIN_HOSTS, lowered here):
  // a power of two of hosts, and 5 hosts (one folded pair).
  v.push_back({8, "hierarchical", 4, "XCCL_HIERARCHICAL_LOG_MIN_HOSTS=4"});
  v.push_back({10, "hierarchical", 5, "XCCL_HIERARCHICAL_LOG_MIN_HOSTS=4"});
  v.push_back({5, "twolevel", 2});
  v.push_back({7, "twolevel", 3});
  v.push_back({6, "", 3});
  return v;
}

INSTANTIATE_TEST_SUITE_P(World, Coll, ::testing::ValuesIn(worlds()), paramName);

}  // namespace
}  // namespace xccl_coll_test
