// Payload lanes (XCCL_SHM_LANE): the shared-memory transport carries payloads in a second
// ring of shareable device memory and frame headers in the byte ring. CUDA uses them by
// default (device-to-device through CUDA IPC); the host device can share memory too (a
// memfd), which is how the same transport and engine code is checked on every machine.
// Tiny lanes and rings make every payload wrap and wait for space many times.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/device/device.h"
#include "collectives/transport/transport.h"
#include "connect_util.h"
#include "test_collectives_common.h"

namespace xccl_coll_test {
namespace {

using xccl_test::check;

bool laneOf(const char* mode) {
  xccl_test::ScopedEnv lane("XCCL_SHM_LANE", mode);
  auto store = xccl::makeMemoryStore();
  std::atomic<int> withLane{0};
  xccl_test::runThreads(
      2,
      [&](int rank) {
        std::atomic<bool> abortFlag{false};
        xccl::PeerSetup s =
            xccl_test::connectEveryPeer(*store, rank, 2, "lane-secret", xccl::getDevice("host", 0),
                                        xccl::Deadline::after(20000), abortFlag);
        xccl::Connection* c = s.connections[1 - rank].get();
        ASSERT_NE(c, nullptr);
        EXPECT_STREQ(c->kind(), "SHM");
        if (c->payloadLane()) ++withLane;
      },
      60);
  EXPECT_TRUE(withLane == 0 || withLane == 2) << "the two directions differ";
  return withLane == 2;
}

TEST(ShmLane, UsedWhenAskedForAndNotByDefaultOnTheHost) {
  EXPECT_TRUE(laneOf("1"));
  EXPECT_FALSE(laneOf("0"));
  EXPECT_FALSE(laneOf(nullptr));  // the host device prefers its byte rings
}

TEST(ShmLane, CollectivesThroughTinyLanes) {
  xccl_test::ScopedEnv lane("XCCL_SHM_LANE", "1");
  xccl_test::ScopedEnv laneSize("XCCL_SHM_LANE_BUFFSIZE", "4096");
  xccl_test::ScopedEnv ringSize("XCCL_SHM_BUFFSIZE", "1024");
  for (const char* algo : {"ring", "direct", "chain"}) {
    xccl_test::ScopedEnv force("XCCL_ALGO", algo);
    const int n = 3;
    ThreadWorld world(n);
    world.run([&](int rank, xcclComm_t comm) {
      for (xcclDataType_t t : {xcclInt8, xcclFloat32, xcclFloat64}) {
        for (size_t count : {size_t{1}, size_t{1001}, size_t{70001}}) {
          Buf in(t, count), sum(t, count), gathered(t, count * n), bcast(t, count);
          for (size_t i = 0; i < count; ++i) in.set(i, reduceInput(xcclSum, t, rank, i));
          check(xcclAllReduce(in.data(), sum.data(), count, t, xcclSum, comm, nullptr), comm);
          check(xcclAllGather(in.data(), gathered.data(), count, t, comm, nullptr), comm);
          check(xcclBroadcast(in.data(), bcast.data(), count, t, 1, comm, nullptr), comm);
          waitAll(comm);
          const std::string what =
              std::string(algo) + " dtype " + std::to_string(t) + " x" + std::to_string(count);
          expectMatches(
              sum, 0, count, [&](size_t i) { return reduceExpected(xcclSum, t, n, i); },
              "allreduce " + what);
          for (int r = 0; r < n; ++r) {
            expectMatches(
                gathered, r * count, count, [&](size_t i) { return reduceInput(xcclSum, t, r, i); },
                "allgather " + what);
          }
          expectMatches(
              bcast, 0, count, [&](size_t i) { return reduceInput(xcclSum, t, 1, i); },
              "broadcast " + what);
        }
      }
    });
  }
}

TEST(ShmLane, CollectivesBetweenProcesses) {
  xccl_test::ScopedEnv lane("XCCL_SHM_LANE", "1");
  xccl_test::ScopedEnv laneSize("XCCL_SHM_LANE_BUFFSIZE", "8192");
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  const int n = 3;
  xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclComm_t comm = nullptr;
        check(xcclCommInitRank(&comm, n, id, rank), nullptr);
        const size_t count = 100003;
        Buf in(xcclFloat32, count), out(xcclFloat32, count);
        for (size_t i = 0; i < count; ++i) in.set(i, reduceInput(xcclSum, xcclFloat32, rank, i));
        check(xcclAllReduce(in.data(), out.data(), count, xcclFloat32, xcclSum, comm, nullptr),
              comm);
        waitAll(comm);
        size_t bad = expectMatches(
            out, 0, count, [&](size_t i) { return reduceExpected(xcclSum, xcclFloat32, n, i); },
            "allreduce between processes");
        xcclCommDestroy(comm);
        EXPECT_EQ(bad, 0u);
      },
      60);
}

}  // namespace
}  // namespace xccl_coll_test
