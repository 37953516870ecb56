// XCCL_STREAM_CALLER: operations run on the calling thread, in order with the operations
// enqueued for the progress thread, every collective and dtype, errors returned by the call
// itself; refused where it cannot keep its promise; xcclCommInterrupt ends such a call from
// another thread.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "test_collectives_common.h"

namespace xccl_coll_test {
namespace {

using xccl_test::check;
const xcclStream_t kCaller = XCCL_STREAM_CALLER;

// An op enqueued for the progress thread, then one on the caller that reads its output:
// the caller's op runs after it (in issue order), so it sees n, not 1, in every element.
TEST(Caller, RunsAfterTheOperationsEnqueuedBeforeIt) {
  const int n = 3;
  const size_t count = (1u << 20) + 3;  // large enough that the first op is still running
  ThreadWorld world(n);
  world.run([&](int rank, xcclComm_t comm) {
    Buf x(xcclFloat32, count), y(xcclFloat32, count);
    x.fill(1);
    check(xcclAllReduce(x.data(), x.data(), count, xcclFloat32, xcclSum, comm, nullptr), comm);
    check(xcclAllReduce(x.data(), y.data(), count, xcclFloat32, xcclSum, comm, kCaller), comm);
    // Complete on return: no wait needed, and the event of everything so far is done.
    xcclEvent_t ev;
    check(xcclEventRecord(&ev, comm), comm);
    EXPECT_EQ(xcclEventQuery(&ev), xcclSuccess) << "rank " << rank;
    expectMatches(
        y, 0, count, [&](size_t) { return n * n; }, "caller op after enqueued op");
    // And the other way round: an op enqueued after a caller op.
    check(xcclAllReduce(y.data(), y.data(), count, xcclFloat32, xcclSum, comm, nullptr), comm);
    waitAll(comm);
    expectMatches(
        y, 0, count, [&](size_t) { return n * n * n; }, "enqueued op after caller op");
  });
}

// Every collective with the caller as its stream, for a few dtypes and sizes that cover the
// direct and the ring / chain algorithms, and point-to-point in a group.
TEST(Caller, EveryCollectiveAndDtype) {
  const int n = 3;
  ThreadWorld world(n);
  world.run([&](int rank, xcclComm_t comm) {
    for (size_t count : {size_t{1}, size_t{1001}, size_t{300000}}) {
      for (xcclDataType_t t : {xcclFloat32, xcclBfloat16, xcclInt64, xcclUint8}) {
        const std::string tag = std::string(xcclTypeName(t)) + " x " + std::to_string(count);
        Buf ar(t, count), bc(t, count), agIn(t, count), ag(t, count * n), rsIn(t, count * n),
            rs(t, count), aaIn(t, count * n), aa(t, count * n), rdIn(t, count), rd(t, count);
        for (size_t i = 0; i < count; ++i) {
          ar.set(i, reduceInput(xcclMax, t, rank, i));
          rdIn.set(i, reduceInput(xcclMax, t, rank, i));
          bc.set(i, rank == 2 ? pattern(2, i, t) : 0);
          agIn.set(i, pattern(rank, i, t));
        }
        for (size_t j = 0; j < count * n; ++j) {
          rsIn.set(j, reduceInput(xcclMax, t, rank, j));
          aaIn.set(j, pattern(rank, j, t));
        }
        check(xcclAllReduce(ar.data(), ar.data(), count, t, xcclMax, comm, kCaller), comm);
        check(xcclReduce(rdIn.data(), rd.data(), count, t, xcclMax, 1, comm, kCaller), comm);
        check(xcclBroadcast(bc.data(), bc.data(), count, t, 2, comm, kCaller), comm);
        check(xcclAllGather(agIn.data(), ag.data(), count, t, comm, kCaller), comm);
        check(xcclReduceScatter(rsIn.data(), rs.data(), count, t, xcclMax, comm, kCaller), comm);
        check(xcclAllToAll(aaIn.data(), aa.data(), count, t, comm, kCaller), comm);
        check(xcclBarrier(comm, kCaller), comm);
        expectMatches(
            ar, 0, count, [&](size_t i) { return reduceExpected(xcclMax, t, n, i); },
            "allreduce " + tag);
        if (rank == 1) {
          expectMatches(
              rd, 0, count, [&](size_t i) { return reduceExpected(xcclMax, t, n, i); },
              "reduce " + tag);
        }
        expectMatches(
            bc, 0, count, [&](size_t i) { return pattern(2, i, t); }, "broadcast " + tag);
        expectMatches(
            ag, 0, count * n,
            [&](size_t j) { return pattern(static_cast<int>(j / count), j % count, t); },
            "allgather " + tag);
        expectMatches(
            rs, 0, count, [&](size_t i) { return reduceExpected(xcclMax, t, n, rank * count + i); },
            "reducescatter " + tag);
        expectMatches(
            aa, 0, count * n,
            [&](size_t j) {
              const int src = static_cast<int>(j / count);
              return pattern(src, rank * count + j % count, t);
            },
            "alltoall " + tag);
      }
    }
    // Point-to-point: a ring of sends and receives in one group on the caller.
    const size_t count = 70000;
    Buf s(xcclInt32, count), r(xcclInt32, count);
    for (size_t i = 0; i < count; ++i) s.set(i, pattern(rank, i, xcclInt32));
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    check(xcclGroupStart());
    check(xcclSend(s.data(), count, xcclInt32, next, comm, kCaller), comm);
    check(xcclRecv(r.data(), count, xcclInt32, prev, comm, kCaller), comm);
    check(xcclGroupEnd(), comm);
    expectMatches(
        r, 0, count, [&](size_t i) { return pattern(prev, i, xcclInt32); }, "send/recv ring");
  });
}

// A failing operation on the caller returns its error from the call itself, naming the
// cause, and fails the communicator as any failure does.
TEST(Caller, TheOperationsErrorIsTheCallsResult) {
  ThreadWorld world(2);
  Buf a(xcclFloat32, 200), b(xcclFloat32, 200);
  world.run([&](int rank, xcclComm_t comm) {
    const size_t count = rank == 0 ? 100 : 200;
    auto t0 = Clock::now();
    xcclResult_t r = xcclAllReduce(rank ? b.data() : a.data(), rank ? b.data() : a.data(), count,
                                   xcclFloat32, xcclSum, comm, kCaller);
    EXPECT_EQ(r, xcclRemoteError) << "rank " << rank;
    EXPECT_LT(secondsSince(t0), 20.0);
    const std::string why = xcclGetLastError(comm);
    EXPECT_NE(why.find("collective mismatch"), std::string::npos) << why;
    xcclResult_t async = xcclSuccess;
    check(xcclCommGetAsyncError(comm, &async), comm);
    EXPECT_EQ(async, xcclRemoteError);
    // Later calls fail at once, on the caller too.
    EXPECT_NE(xcclBarrier(comm, kCaller), xcclSuccess);
  });
}

// On a device communicator the stream argument orders the operation on a device stream:
// the caller cannot be one. A group spanning two communicators is refused (running one part
// to its end before posting the other could wait forever).
TEST(Caller, RefusedWhereItCannotKeepItsPromise) {
  ThreadWorld world(1);
  world.run([&](int, xcclComm_t comm) {
    xcclComm_t xdev = nullptr;
    xcclConfig_t cfg{};
    cfg.deviceType = xcclDeviceXdev;
    cfg.device = 0;
    int dev = 0;
    check(xcclCommInitAllConfig(&xdev, 1, &dev, &cfg));
    float x = 1;
    EXPECT_EQ(xcclBarrier(xdev, kCaller), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(xdev)).find("XCCL_STREAM_CALLER"), std::string::npos)
        << xcclGetLastError(xdev);
    check(xcclGroupStart());
    check(xcclAllReduce(&x, &x, 1, xcclFloat32, xcclSum, comm, kCaller), comm);
    check(xcclBarrier(xdev, nullptr), xdev);
    EXPECT_EQ(xcclGroupEnd(), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("spans 2 communicators"),
              std::string::npos)
        << xcclGetLastError(nullptr);
    check(xcclCommDestroy(xdev));
  });
}

// Rank 1 never calls: rank 0's call on the caller waits (its peer is alive, so heartbeats
// do not end it) until another thread interrupts the communicator.
TEST(Caller, InterruptFromAnotherThreadEndsTheCall) {
  xccl_test::MemoryStore store;
  xcclComm_t comms[2] = {nullptr, nullptr};
  xccl_test::runThreads(2,
                        [&](int rank) { comms[rank] = xccl_test::initThreadComm(store, 2, rank); });
  float x[4] = {1, 1, 1, 1};
  std::thread interrupter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(xcclCommInterrupt(comms[0]), xcclSuccess);
  });
  auto t0 = Clock::now();
  xcclResult_t r = xcclAllReduce(x, x, 4, xcclFloat32, xcclSum, comms[0], kCaller);
  const double took = secondsSince(t0);
  interrupter.join();
  EXPECT_NE(r, xcclSuccess);
  EXPECT_GT(took, 0.2);
  EXPECT_LT(took, 5.0);
  EXPECT_NE(std::string(xcclGetLastError(comms[0])).find("aborted"), std::string::npos)
      << xcclGetLastError(comms[0]);
  EXPECT_EQ(xcclCommInterrupt(comms[0]), xcclSuccess);  // idempotent
  EXPECT_EQ(xcclCommAbort(comms[0]), xcclSuccess);
  EXPECT_EQ(xcclCommAbort(comms[1]), xcclSuccess);
}

}  // namespace
}  // namespace xccl_coll_test
