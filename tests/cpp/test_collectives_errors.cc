// Collectives beyond the plain matrix: groups, recv-any, argument errors, ranks that
// disagree, ranks as processes (xcclGetUniqueId + fork) and a peer killed mid-run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <string>

#include "test_collectives_common.h"

namespace xccl_coll_test {
namespace {

using xccl_test::check;

// Waits for everything enqueued; returns the result instead of throwing.
xcclResult_t waitResult(xcclComm_t comm, int64_t timeoutMs = -1) {
  xcclEvent_t ev;
  xcclResult_t r = xcclEventRecord(&ev, comm);
  return r != xcclSuccess ? r : xcclEventWait(&ev, timeoutMs);
}

// ---- groups ----

// Everyone sends 8 MiB to next and receives 8 MiB from prev. One at a time this would
// deadlock (every send waits for a receiver busy sending); in a group they progress together.
TEST(CollGroups, RingOfLargeSendsCompletesInsideAGroup) {
  const int n = 4;
  const size_t count = 2u << 20;  // 8 MiB of float32
  ThreadWorld world(n);
  world.run([&](int rank, xcclComm_t comm) {
    Buf send(xcclFloat32, count), recv(xcclFloat32, count);
    for (size_t i = 0; i < count; ++i) send.set(i, pattern(rank, i, xcclFloat32));
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    check(xcclGroupStart());
    check(xcclSend(send.data(), count, xcclFloat32, next, comm, nullptr), comm);
    check(xcclRecv(recv.data(), count, xcclFloat32, prev, comm, nullptr), comm);
    check(xcclGroupEnd());
    waitAll(comm);
    expectMatches(
        recv, 0, count, [&](size_t i) { return pattern(prev, i, xcclFloat32); },
        "rank " + std::to_string(rank) + " recv from prev");
  });
}

// A group mixing collectives (run in issue order) with point-to-point in both directions.
TEST(CollGroups, CollectivesAndPointToPointInOneGroup) {
  const int n = 3;
  const size_t count = 1001;
  ThreadWorld world(n);
  world.run([&](int rank, xcclComm_t comm) {
    const xcclDataType_t t = xcclInt32;
    Buf a(t, count), b(t, count), sendNext(t, count), sendPrev(t, count), fromPrev(t, count),
        fromNext(t, count);
    for (size_t i = 0; i < count; ++i) {
      a.set(i, reduceInput(xcclSum, t, rank, i));
      b.set(i, reduceInput(xcclMax, t, rank, i));
      sendNext.set(i, pattern(rank, i, t));
      sendPrev.set(i, pattern(rank + 50, i, t));
    }
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    check(xcclGroupStart());
    check(xcclAllReduce(a.data(), a.data(), count, t, xcclSum, comm, nullptr), comm);
    check(xcclSend(sendNext.data(), count, t, next, comm, nullptr), comm);
    check(xcclRecv(fromNext.data(), count, t, next, comm, nullptr), comm);
    check(xcclAllReduce(b.data(), b.data(), count, t, xcclMax, comm, nullptr), comm);
    check(xcclSend(sendPrev.data(), count, t, prev, comm, nullptr), comm);
    check(xcclRecv(fromPrev.data(), count, t, prev, comm, nullptr), comm);
    check(xcclGroupEnd());
    waitAll(comm);
    expectMatches(
        a, 0, count, [&](size_t i) { return reduceExpected(xcclSum, t, n, i); }, "sum");
    expectMatches(
        b, 0, count, [&](size_t i) { return reduceExpected(xcclMax, t, n, i); }, "max");
    expectMatches(
        fromPrev, 0, count, [&](size_t i) { return pattern(prev, i, t); }, "from prev");
    expectMatches(
        fromNext, 0, count, [&](size_t i) { return pattern(next + 50, i, t); }, "from next");
  });
}

// ---- recv-any ----

TEST(CollRecvAny, ReceivesFromEverySenderOnceAndLeavesCollectiveDataAlone) {
  const int n = 4;
  const size_t count = 1001;
  const xcclDataType_t t = xcclInt32;
  ThreadWorld world(n);
  world.run([&](int rank, xcclComm_t comm) {
    Buf sum(t, count);
    for (size_t i = 0; i < count; ++i) sum.set(i, reduceInput(xcclSum, t, rank, i));
    if (rank == 0) {
      std::vector<Buf> got(n - 1, Buf(t, count));
      std::vector<int> peers(n - 1, -1);
      for (int k = 0; k < n - 1; ++k) {
        check(xcclRecvAny(got[k].data(), count, t, &peers[k], comm, nullptr), comm);
      }
      check(xcclAllReduce(sum.data(), sum.data(), count, t, xcclSum, comm, nullptr), comm);
      waitAll(comm);
      std::set<int> seen(peers.begin(), peers.end());
      EXPECT_EQ(seen, (std::set<int>{1, 2, 3}));
      for (int k = 0; k < n - 1; ++k) {
        const int p = peers[k];
        expectMatches(
            got[k], 0, count, [&](size_t i) { return p * 1000.0 + i; },
            "recvany message " + std::to_string(k) + " from rank " + std::to_string(p));
      }
    } else {
      Buf msg(t, count);
      for (size_t i = 0; i < count; ++i) msg.set(i, rank * 1000.0 + i);
      check(xcclSend(msg.data(), count, t, 0, comm, nullptr), comm);
      check(xcclAllReduce(sum.data(), sum.data(), count, t, xcclSum, comm, nullptr), comm);
      waitAll(comm);
    }
    expectMatches(
        sum, 0, count, [&](size_t i) { return reduceExpected(xcclSum, t, n, i); },
        "allreduce after recvany");
  });
}

// ---- argument errors: returned at once, the communicator stays usable ----

TEST(CollErrors, UnsupportedOpDtypeAndBadArgumentsAreInvalidArgument) {
  ThreadWorld world(2);
  world.run([&](int rank, xcclComm_t comm) {
    Buf a(xcclFloat32, 16), b(xcclFloat32, 16);
    Buf flags(xcclBool, 16);
    EXPECT_EQ(xcclAllReduce(a.data(), b.data(), 16, xcclFloat32, xcclBand, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("band"), std::string::npos)
        << xcclGetLastError(nullptr);
    EXPECT_EQ(xcclAllReduce(flags.data(), flags.data(), 16, xcclBool, xcclAvg, comm, nullptr),
              xcclInvalidArgument);
    unsigned char two = 2;
    EXPECT_EQ(xcclAllReducePremulSum(flags.data(), flags.data(), 16, xcclBool, &two, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclReduceScatter(a.data(), b.data(), 8, xcclFloat64, xcclBxor, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclAllReduce(a.data(), b.data(), 16, xcclFloat32, static_cast<xcclRedOp_t>(42), comm,
                            nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclAllReduce(a.data(), b.data(), 16, static_cast<xcclDataType_t>(17), xcclSum, comm,
                            nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclBroadcast(a.data(), b.data(), 16, xcclFloat32, 2, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclReduce(a.data(), b.data(), 16, xcclFloat32, xcclSum, -1, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclSend(a.data(), 16, xcclFloat32, rank, comm, nullptr), xcclInvalidArgument);
    // Still usable: a supported op on the same communicator succeeds on both ranks.
    for (size_t i = 0; i < 16; ++i) a.set(i, rank + 1.0);
    check(xcclAllReduce(a.data(), b.data(), 16, xcclFloat32, xcclSum, comm, nullptr), comm);
    waitAll(comm);
    expectMatches(
        b, 0, 16, [](size_t) { return 3.0; }, "allreduce after rejected calls");
    xcclResult_t async = xcclSuccess;
    check(xcclCommGetAsyncError(comm, &async), comm);
    EXPECT_EQ(async, xcclSuccess);
  });
}

// A send to oneself inside a group is copied into the matching receive, alongside real
// peers' messages; outside a group, or unmatched, it is refused at the call.
TEST(CollGroups, SelfSendAndReceiveInsideAGroup) {
  const int n = 3;
  const size_t count = 777;
  ThreadWorld world(n);
  world.run([&](int rank, xcclComm_t comm) {
    const xcclDataType_t t = xcclFloat64;
    Buf mine(t, count), toSelf(t, count), fromPrev(t, count);
    for (size_t i = 0; i < count; ++i) mine.set(i, pattern(rank, i, t));
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    check(xcclGroupStart());
    check(xcclSend(mine.data(), count, t, rank, comm, nullptr), comm);
    check(xcclSend(mine.data(), count, t, next, comm, nullptr), comm);
    check(xcclRecv(fromPrev.data(), count, t, prev, comm, nullptr), comm);
    check(xcclRecv(toSelf.data(), count, t, rank, comm, nullptr), comm);
    check(xcclGroupEnd());
    waitAll(comm);
    expectMatches(
        toSelf, 0, count, [&](size_t i) { return pattern(rank, i, t); }, "self");
    expectMatches(
        fromPrev, 0, count, [&](size_t i) { return pattern(prev, i, t); }, "prev");
  });
}

TEST(CollErrors, SelfPointToPointOutsideAGroupOrUnmatchedIsRefusedAtTheCall) {
  ThreadWorld world(2);
  world.run([&](int rank, xcclComm_t comm) {
    Buf a(xcclInt32, 8), b(xcclInt32, 8);
    EXPECT_EQ(xcclRecv(a.data(), 8, xcclInt32, rank, comm, nullptr), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("outside a group"), std::string::npos)
        << xcclGetLastError(nullptr);
    // Sizes differ: refused at xcclGroupEnd, before anything is enqueued.
    check(xcclGroupStart());
    check(xcclSend(a.data(), 8, xcclInt32, rank, comm, nullptr), comm);
    check(xcclRecv(b.data(), 4, xcclInt32, rank, comm, nullptr), comm);
    EXPECT_EQ(xcclGroupEnd(), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("itself"), std::string::npos);
    // alltoallv whose own block differs in size: refused at the call, not in the progress
    // thread (which would fail the communicator for every rank).
    size_t sc[2] = {1, 1}, sd[2] = {0, 1}, rc[2] = {1, 1}, rd[2] = {0, 1};
    rc[rank] = 2;
    EXPECT_EQ(xcclAllToAllv(a.data(), sc, sd, b.data(), rc, rd, xcclInt32, comm, nullptr),
              xcclInvalidArgument);
    xcclResult_t async = xcclSuccess;
    check(xcclCommGetAsyncError(comm, &async), comm);
    EXPECT_EQ(async, xcclSuccess);
    check(xcclBarrier(comm, nullptr), comm);
    waitAll(comm);
  });
}

// ---- ranks that disagree fail with an error on every rank, well before the timeout ----

void expectBothFail(const char* algo, const std::function<xcclResult_t(int, xcclComm_t)>& issue,
                    const char* what) {
  xccl_test::ScopedEnv env("XCCL_ALGO", algo);
  ThreadWorld world(2, nullptr, /*timeoutMs=*/60000);
  world.run([&](int rank, xcclComm_t comm) {
    auto t0 = Clock::now();
    xcclResult_t r = issue(rank, comm);
    if (r == xcclSuccess) r = waitResult(comm);
    EXPECT_NE(r, xcclSuccess) << what << ": rank " << rank << " succeeded";
    EXPECT_LT(secondsSince(t0), 20.0) << what << ": rank " << rank << " took until the timeout";
    xcclResult_t async = xcclSuccess;
    check(xcclCommGetAsyncError(comm, &async), comm);
    EXPECT_NE(async, xcclSuccess) << what << ": rank " << rank;
    EXPECT_STRNE(xcclGetLastError(comm), "") << what;
  });
}

TEST(CollErrors, MismatchedCountsFailOnBothRanks) {
  for (const char* algo : {"", "ring", "direct"}) {
    SCOPED_TRACE(std::string("XCCL_ALGO=") + algo);
    Buf a(xcclFloat32, 200), b(xcclFloat32, 200);  // shared: the ranks must not finish
    Buf c(xcclFloat32, 200), d(xcclFloat32, 200);
    expectBothFail(
        algo[0] ? algo : nullptr,
        [&](int rank, xcclComm_t comm) {
          size_t count = rank == 0 ? 100 : 200;
          return xcclAllReduce(rank ? c.data() : a.data(), rank ? d.data() : b.data(), count,
                               xcclFloat32, xcclSum, comm, nullptr);
        },
        "allreduce 100 vs 200 elements");
  }
}

// Both collectives send and receive on every rank, so both ranks must notice. (A rank that
// only sends, like a broadcast root, may legitimately complete; its next operation fails.)
TEST(CollErrors, MismatchedCollectivesFailOnBothRanks) {
  Buf a(xcclFloat32, 64), b(xcclFloat32, 64), c(xcclFloat32, 64);
  expectBothFail(
      nullptr,
      [&](int rank, xcclComm_t comm) {
        return rank == 0
                   ? xcclAllReduce(a.data(), a.data(), 64, xcclFloat32, xcclSum, comm, nullptr)
                   : xcclAllGather(b.data(), c.data(), 32, xcclFloat32, comm, nullptr);
      },
      "allreduce vs allgather");
}

TEST(CollErrors, ForcedAlgorithmThatDeclinesFailsTheCallNamingIt) {
  xccl_test::ScopedEnv cap("XCCL_DIRECT_TEMP_MAX", "1024");
  xccl_test::ScopedEnv env("XCCL_ALGO", "allreduce=direct");
  ThreadWorld world(2);
  world.run([&](int rank, xcclComm_t comm) {
    Buf a(xcclFloat32, 1001);
    check(xcclAllReduce(a.data(), a.data(), 1001, xcclFloat32, xcclSum, comm, nullptr), comm);
    EXPECT_EQ(waitResult(comm), xcclInvalidUsage);
    std::string msg = xcclGetLastError(comm);
    EXPECT_NE(msg.find("'direct'"), std::string::npos) << msg;
  });
}

// ---- ranks as processes ----

// Every collective once in real processes over shared memory, checked like the thread suite.
void processCollectives(int n, const char* algo) {
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  xccl_test::ScopedEnv env("XCCL_ALGO", algo);
  xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclComm_t comm = initHostRank(id, n, rank);
        for (size_t count : {size_t{1001}, size_t{(1u << 20) + 1}}) {
          for (xcclDataType_t t : {xcclFloat32, xcclBfloat16, xcclInt64}) {
            Buf ar(t, count), bc(t, count), ag(t, count * n), agIn(t, count), rsIn(t, count * n),
                rs(t, count), aaIn(t, count * n), aa(t, count * n);
            for (size_t i = 0; i < count; ++i) {
              ar.set(i, reduceInput(xcclSum, t, rank, i));
              bc.set(i, rank == 1 ? pattern(1, i, t) : 0);
              agIn.set(i, pattern(rank, i, t));
            }
            for (size_t j = 0; j < count * n; ++j) {
              rsIn.set(j, reduceInput(xcclMax, t, rank, j));
              aaIn.set(j, pattern(rank, j, t));
            }
            check(xcclAllReduce(ar.data(), ar.data(), count, t, xcclSum, comm, nullptr), comm);
            check(xcclBroadcast(bc.data(), bc.data(), count, t, 1, comm, nullptr), comm);
            check(xcclAllGather(agIn.data(), ag.data(), count, t, comm, nullptr), comm);
            check(xcclReduceScatter(rsIn.data(), rs.data(), count, t, xcclMax, comm, nullptr),
                  comm);
            check(xcclAllToAll(aaIn.data(), aa.data(), count, t, comm, nullptr), comm);
            check(xcclBarrier(comm, nullptr), comm);
            waitAll(comm);
            std::string tag =
                std::string(" ") + xcclTypeName(t) + " count " + std::to_string(count);
            expectMatches(
                ar, 0, count, [&](size_t i) { return reduceExpected(xcclSum, t, n, i); },
                "allreduce" + tag);
            expectMatches(
                bc, 0, count, [&](size_t i) { return pattern(1, i, t); }, "broadcast" + tag);
            expectMatches(
                ag, 0, count * n,
                [&](size_t j) { return pattern(static_cast<int>(j / count), j % count, t); },
                "allgather" + tag);
            expectMatches(
                rs, 0, count,
                [&](size_t i) { return reduceExpected(xcclMax, t, n, rank * count + i); },
                "reducescatter" + tag);
            expectMatches(
                aa, 0, count * n,
                [&](size_t j) {
                  return pattern(static_cast<int>(j / count), rank * count + j % count, t);
                },
                "alltoall" + tag);
          }
        }
        check(xcclCommDestroy(comm));
      },
      /*timeoutSec=*/120);
}

TEST(CollProcesses, ThreeRanksAutomatic) { processCollectives(3, nullptr); }

// ---- one process, several ranks (xcclCommInitAll) ----

TEST(CollInitAll, OneThreadDrivesEveryRank) {
  for (int n : {1, 2, 4}) {
    std::vector<xcclComm_t> comms(n);
    check(xcclCommInitAll(comms.data(), n, nullptr), nullptr);
    std::vector<std::vector<float>> bufs(n, std::vector<float>(1000));
    for (int r = 0; r < n; ++r) {
      int rank = -1, count = -1;
      check(xcclCommUserRank(comms[r], &rank), comms[r]);
      check(xcclCommCount(comms[r], &count), comms[r]);
      EXPECT_EQ(rank, r);
      EXPECT_EQ(count, n);
      for (size_t i = 0; i < bufs[r].size(); ++i) bufs[r][i] = float(r + i % 7);
    }
    // Enqueueing never blocks, so one thread issues every rank's part, then waits.
    for (int r = 0; r < n; ++r) {
      check(xcclAllReduce(bufs[r].data(), bufs[r].data(), bufs[r].size(), xcclFloat32, xcclSum,
                          comms[r], nullptr),
            comms[r]);
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(waitResult(comms[r]), xcclSuccess) << xcclGetLastError(comms[r]);
      for (size_t i = 0; i < bufs[r].size(); ++i) {
        ASSERT_EQ(bufs[r][i], float(n * (n - 1) / 2 + n * (i % 7))) << "rank " << r << " i " << i;
      }
    }
    for (xcclComm_t c : comms) check(xcclCommDestroy(c), nullptr);
  }
}

TEST(CollInitAll, BadArgumentsAreRefused) {
  xcclComm_t comms[2];
  int dup[2] = {1, 1};
  EXPECT_EQ(xcclCommInitAll(nullptr, 2, nullptr), xcclInvalidArgument);
  EXPECT_EQ(xcclCommInitAll(comms, 0, nullptr), xcclInvalidArgument);
  EXPECT_EQ(xcclCommInitAll(comms, 2, dup), xcclInvalidArgument);
  EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("distinct"), std::string::npos);
}
TEST(CollProcesses, FourRanksRing) { processCollectives(4, "ring"); }
TEST(CollProcesses, FourRanksDirect) { processCollectives(4, "direct"); }

// A rank SIGKILLs itself mid-run: the others' next operation fails fast (long before the
// 60 s communicator timeout) and the communicator reports the error asynchronously.
TEST(CollProcesses, KilledPeerMakesOthersFailFast) {
  const int n = 3, victim = 2;
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  auto status = xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclComm_t comm = initHostRank(id, n, rank);
        const size_t count = 1u << 20;
        Buf a(xcclFloat32, count);
        a.fill(1);
        check(xcclAllReduce(a.data(), a.data(), count, xcclFloat32, xcclSum, comm, nullptr), comm);
        waitAll(comm);
        EXPECT_EQ(a.get(0), n);
        if (rank == victim) raise(SIGKILL);
        auto t0 = Clock::now();
        xcclResult_t r = xcclSuccess;
        for (int k = 0; k < 5 && r == xcclSuccess; ++k) {
          r = xcclAllReduce(a.data(), a.data(), count, xcclFloat32, xcclSum, comm, nullptr);
          if (r == xcclSuccess) r = waitResult(comm);
        }
        EXPECT_NE(r, xcclSuccess) << "rank " << rank << ": allreduce with a dead peer succeeded";
        EXPECT_LT(secondsSince(t0), 15.0)
            << "rank " << rank << " noticed the dead peer only at the timeout";
        xcclResult_t async = xcclSuccess;
        check(xcclCommGetAsyncError(comm, &async), comm);
        EXPECT_NE(async, xcclSuccess);
        fprintf(stderr, "rank %d: failed after %.2f s with %s: %s\n", rank, secondsSince(t0),
                xcclGetErrorString(r), xcclGetLastError(comm));
        xcclCommAbort(comm);
      },
      /*timeoutSec=*/60, /*expectAllSucceed=*/false);
  for (auto& [rank, st] : status) {
    if (rank == victim) {
      EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "victim status " << st;
    } else {
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank " << rank << " status " << st;
    }
  }
}

}  // namespace
}  // namespace xccl_coll_test
