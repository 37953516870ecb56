// Point-to-point calls made separately (not in a group), as torch's isend and irecv are:
// a ring of "send to next, then receive from prev" larger than what the transports buffer
// completes (the progress thread posts the receive while the send still waits for its
// peer), over shared memory and over TCP; each op still completes as soon as it and every
// earlier op are done, not when the whole run is; a collective after them runs after them.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "test_collectives_common.h"

namespace xccl_coll_test {
namespace {

using xccl_test::check;

struct RingCase {
  int n;
  bool tcp;
};

class P2PRun : public ::testing::TestWithParam<RingCase> {};

// Ranks on distinct fake hosts connect over TCP; otherwise over shared memory.
std::function<std::string(int)> hosts(bool tcp) {
  if (!tcp) return nullptr;
  return [](int r) { return "host" + std::to_string(r); };
}

// 8 MiB per message: 8x the 1 MiB SHM ring, and beyond what the loopback socket buffers
// hold, so each send can finish only once its peer receives. One op at a time, this
// deadlocked until the timeout (10 s here) on every rank.
TEST_P(P2PRun, UngroupedSendThenRecvRingLargerThanTheBuffersCompletes) {
  const RingCase c = GetParam();
  const size_t count = 2u << 20;
  ThreadWorld world(c.n, hosts(c.tcp), /*timeoutMs=*/10000);
  world.run([&](int rank, xcclComm_t comm) {
    const int next = (rank + 1) % c.n, prev = (rank + c.n - 1) % c.n;
    Buf send(xcclFloat32, count), recv(xcclFloat32, count), send2(xcclInt32, 1000),
        recv2(xcclInt32, 1000);
    for (size_t i = 0; i < count; ++i) send.set(i, pattern(rank, i, xcclFloat32));
    for (size_t i = 0; i < 1000; ++i) send2.set(i, pattern(rank + 7, i, xcclInt32));
    for (int round = 0; round < 3; ++round) {
      recv.fill(0);
      recv2.fill(0);
      // Two rounds of the ring queued before any wait: messages still match in order.
      check(xcclSend(send.data(), count, xcclFloat32, next, comm, nullptr), comm);
      check(xcclRecv(recv.data(), count, xcclFloat32, prev, comm, nullptr), comm);
      check(xcclSend(send2.data(), 1000, xcclInt32, next, comm, nullptr), comm);
      check(xcclRecv(recv2.data(), 1000, xcclInt32, prev, comm, nullptr), comm);
      waitAll(comm);
      expectMatches(
          recv, 0, count, [&](size_t i) { return pattern(prev, i, xcclFloat32); },
          "large recv from prev");
      expectMatches(
          recv2, 0, 1000, [&](size_t i) { return pattern(prev + 7, i, xcclInt32); },
          "small recv from prev");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Rings, P2PRun,
                         ::testing::Values(RingCase{2, false}, RingCase{3, false},
                                           RingCase{2, true}, RingCase{3, true}),
                         [](const ::testing::TestParamInfo<RingCase>& i) {
                           return std::to_string(i.param.n) + "ranks_" +
                                  (i.param.tcp ? "tcp" : "shm");
                         });

// Rank 0 sends, then posts a receive that rank 1 answers only a second later: the send's
// event completes as soon as the send is done, not with the receive after it.
TEST(P2PRunOrder, AnOpCompletesWithoutWaitingForTheOpsTakenAfterIt) {
  ThreadWorld world(2, nullptr, 20000);
  world.run([&](int rank, xcclComm_t comm) {
    const size_t count = 1u << 20;
    Buf big(xcclFloat32, count), small(xcclInt64, 4);
    if (rank == 0) {
      big.fill(3);
      check(xcclSend(big.data(), count, xcclFloat32, 1, comm, nullptr), comm);
      xcclEvent_t sent;
      check(xcclEventRecord(&sent, comm), comm);
      check(xcclRecv(small.data(), 4, xcclInt64, 1, comm, nullptr), comm);
      auto t0 = Clock::now();
      check(xcclEventWait(&sent, -1), comm);
      EXPECT_LT(secondsSince(t0), 0.8) << "the send waited for the receive queued after it";
      EXPECT_EQ(xcclEventQuery(&sent), xcclSuccess);
      waitAll(comm);
      expectMatches(
          small, 0, 4, [](size_t) { return 11; }, "late small message");
    } else {
      check(xcclRecv(big.data(), count, xcclFloat32, 0, comm, nullptr), comm);
      waitAll(comm);
      expectMatches(
          big, 0, count, [](size_t) { return 3; }, "big message");
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      small.fill(11);
      check(xcclSend(small.data(), 4, xcclInt64, 0, comm, nullptr), comm);
      waitAll(comm);
    }
  });
}

// Sends and receives queued, then a collective, then more of them: the collective runs
// after the first ones and before the later ones on every rank, and all are exact.
TEST(P2PRunOrder, ACollectiveBetweenPointToPointOpsKeepsItsPlace) {
  const int n = 3;
  ThreadWorld world(n, nullptr, 20000);
  world.run([&](int rank, xcclComm_t comm) {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    const size_t count = 300000;
    Buf a(xcclFloat32, count), b(xcclFloat32, count), sum(xcclFloat32, count);
    a.fill(rank + 1);
    check(xcclSend(a.data(), count, xcclFloat32, next, comm, nullptr), comm);
    check(xcclRecv(b.data(), count, xcclFloat32, prev, comm, nullptr), comm);
    // Reads b: correct only if the receive before it is complete when it starts.
    check(xcclAllReduce(b.data(), sum.data(), count, xcclFloat32, xcclSum, comm, nullptr), comm);
    // Overwrites a after the send above has read it... only once the allreduce is done.
    check(xcclRecv(a.data(), count, xcclFloat32, prev, comm, nullptr), comm);
    check(xcclSend(sum.data(), count, xcclFloat32, next, comm, nullptr), comm);
    waitAll(comm);
    expectMatches(
        b, 0, count, [&](size_t) { return prev + 1; }, "ring before the allreduce");
    expectMatches(
        sum, 0, count, [&](size_t) { return n * (n + 1) / 2; }, "allreduce");
    expectMatches(
        a, 0, count, [&](size_t) { return n * (n + 1) / 2; }, "ring after it");
  });
}

}  // namespace
}  // namespace xccl_coll_test
