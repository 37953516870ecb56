// Streaming (non-temporal) stores for large outputs: forcing them on for every size
// (XCCL_STREAMING_STORE_BYTES=0) must not change any result, including receives that are
// forwarded (ring allgather, chain broadcast) and so must keep using cached stores.
#include <gtest/gtest.h>

#include <string>

#include "test_collectives_common.h"

namespace xccl_coll_test {
namespace {

using xccl_test::check;

TEST(CollStreaming, ForcedStreamingStoresKeepEveryResult) {
  xccl_test::ScopedEnv streaming("XCCL_STREAMING_STORE_BYTES", "0");
  for (const char* algo : {"ring", "direct"}) {
    xccl_test::ScopedEnv force("XCCL_ALGO", algo);
    const int n = 3;
    ThreadWorld world(n);
    world.run([&](int rank, xcclComm_t comm) {
      for (size_t count : {size_t{1}, size_t{1001}, size_t{300000}}) {
        const xcclDataType_t t = xcclFloat32;
        Buf in(t, count), sum(t, count), gathered(t, count * n), bcast(t, count);
        for (size_t i = 0; i < count; ++i) in.set(i, pattern(rank, i, t));
        if (rank == 1) bcast.fill(0);
        check(xcclAllReduce(in.data(), sum.data(), count, t, xcclSum, comm, nullptr), comm);
        check(xcclAllGather(in.data(), gathered.data(), count, t, comm, nullptr), comm);
        check(xcclBroadcast(in.data(), bcast.data(), count, t, /*root=*/2, comm, nullptr), comm);
        waitAll(comm);
        const std::string what = std::string(algo) + " count " + std::to_string(count);
        expectMatches(
            sum, 0, count,
            [&](size_t i) {
              double s = 0;
              for (int r = 0; r < n; ++r) s += pattern(r, i, t);
              return s;
            },
            "allreduce " + what);
        for (int r = 0; r < n; ++r) {
          expectMatches(
              gathered, r * count, count, [&](size_t i) { return pattern(r, i, t); },
              "allgather block " + std::to_string(r) + " " + what);
        }
        expectMatches(
            bcast, 0, count, [&](size_t i) { return pattern(2, i, t); }, "broadcast " + what);
      }
    });
  }
}

}  // namespace
}  // namespace xccl_coll_test
