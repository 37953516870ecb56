// xcclMemAlloc / xcclMemFree and xcclCommRegister / xcclCommDeregister: memory the processes
// of a host can map, read in place by the host device's collectives (single copy), a freed
// and reallocated buffer never read through a stale mapping, and bad input refused with the
// reason.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "xccl.h"
#include "xdev_runtime.h"

namespace {

using xccl_test::check;
using xccl_test::ScopedEnv;

// Mappings of xcclMemAlloc memory in this process: its own allocations and its peers'.
int memMappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    n += line.find("memfd:xccl-mem") != std::string::npos;
  return n;
}

TEST(MemAlloc, PageAlignedZeroFilledAndFreedOnce) {
  const long page = sysconf(_SC_PAGESIZE);
  for (size_t bytes : {size_t(1), size_t(4097), size_t(3) << 20}) {
    void* p = nullptr;
    ASSERT_EQ(xcclMemAlloc(&p, bytes), xcclSuccess) << xcclGetLastError(nullptr);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % page, 0u);
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < bytes; i += 509) ASSERT_EQ(b[i], 0) << i;
    std::memset(p, 0x5a, bytes);  // all of it is ours to write
    ASSERT_EQ(xcclMemFree(p), xcclSuccess);
    EXPECT_EQ(xcclMemFree(p), xcclInvalidArgument);  // twice
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("freed already"), std::string::npos);
  }
  EXPECT_EQ(xcclMemFree(nullptr), xcclSuccess);
  void* m = std::malloc(64);
  EXPECT_EQ(xcclMemFree(m), xcclInvalidArgument);
  std::free(m);
  void* p = nullptr;
  EXPECT_EQ(xcclMemAlloc(&p, 0), xcclInvalidArgument);
  EXPECT_EQ(xcclMemAlloc(nullptr, 64), xcclInvalidArgument);
}

// 3 processes on the host device, every message of 64 bytes or more read in place: every
// collective exact, each rank mapping its peers' memory; then every buffer freed and made
// again (the kernel gives the same fd numbers back) with other values: a peer that read the
// old allocation through a kept mapping would return the old sums.
TEST(MemAlloc, HostProcessesReadEachOthersBuffersInPlace) {
  ScopedEnv min("XCCL_PEER_READ_MIN", "64");
  const int n = 3;
  const size_t count = 70001;
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclComm_t comm = xccl_test::initProcessComm(id, n, rank);
        const int before = memMappings();
        for (int round = 0; round < 2; ++round) {
          float *a = nullptr, *g = nullptr, *r = nullptr;
          check(xcclMemAlloc(reinterpret_cast<void**>(&a), count * sizeof(float)));
          check(xcclMemAlloc(reinterpret_cast<void**>(&g), count * n * sizeof(float)));
          check(xcclMemAlloc(reinterpret_cast<void**>(&r), count * sizeof(float)));
          for (size_t i = 0; i < count; ++i) a[i] = float(i % 31 + rank + 100 * round);
          check(xcclAllReduce(a, a, count, xcclFloat32, xcclSum, comm, nullptr), comm);
          check(xcclAllGather(a, g, count, xcclFloat32, comm, nullptr), comm);
          check(xcclReduceScatter(g, r, count / n, xcclFloat32, xcclSum, comm, nullptr), comm);
          check(xcclBroadcast(a, a, count, xcclFloat32, 2, comm, nullptr), comm);
          xcclEvent_t ev;
          check(xcclEventRecord(&ev, comm), comm);
          check(xcclEventWait(&ev, -1), comm);
          for (size_t i = 0; i < count; ++i) {
            const float sum = float(n * (i % 31 + 100 * round) + n * (n - 1) / 2);
            ASSERT_EQ(a[i], sum) << "allreduce/broadcast, round " << round << " i " << i;
            for (int q = 0; q < n; ++q) ASSERT_EQ(g[q * count + i], sum) << "allgather " << i;
          }
          for (size_t i = 0; i < count / n; ++i) {  // block `rank` of g, summed over ranks
            const size_t j = rank * (count / n) + i;
            const float want = float(n) * g[j];
            ASSERT_EQ(r[i], want) << "reducescatter " << i;
          }
          // Its own three and at least one peer's (the ring reads its predecessor's).
          EXPECT_GE(memMappings() - before, 4) << "round " << round;
          // Safe to free once this rank's operations are done: a send read in place
          // completes only when the peer has read it.
          check(xcclMemFree(a));
          check(xcclMemFree(g));
          check(xcclMemFree(r));
        }
        check(xcclCommDestroy(comm));
      },
      120);
}

TEST(CommRegister, RefusesWhatPeersCannotReadAndOverlapsAndUnknownHandles) {
  xccl_test::MemoryStore store;
  xccl_test::runThreads(2, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, 2, rank, "reg/");
    char* mem = nullptr;
    check(xcclMemAlloc(reinterpret_cast<void**>(&mem), 1 << 20));
    void* h = nullptr;
    // Plain host memory: peers cannot map it.
    std::vector<char> plain(4096);
    EXPECT_EQ(xcclCommRegister(comm, plain.data(), plain.size(), &h), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("xcclMemAlloc"), std::string::npos)
        << xcclGetLastError(nullptr);
    EXPECT_EQ(h, nullptr);
    // Past the end of its allocation.
    EXPECT_EQ(xcclCommRegister(comm, mem + 4096, 1 << 20, &h), xcclInvalidArgument);
    EXPECT_EQ(xcclCommRegister(comm, mem, 0, &h), xcclInvalidArgument);
    // Two halves, then anything overlapping either.
    void *lo = nullptr, *hi = nullptr;
    ASSERT_EQ(xcclCommRegister(comm, mem, 1 << 19, &lo), xcclSuccess) << xcclGetLastError(nullptr);
    ASSERT_EQ(xcclCommRegister(comm, mem + (1 << 19), 1 << 19, &hi), xcclSuccess);
    EXPECT_NE(lo, hi);
    EXPECT_EQ(xcclCommRegister(comm, mem + 100, 10, &h), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("overlaps"), std::string::npos)
        << xcclGetLastError(nullptr);
    EXPECT_EQ(xcclCommRegister(comm, mem + (1 << 19) - 1, 2, &h), xcclInvalidArgument);
    // Deregistered once only; a handle of nothing is refused.
    EXPECT_EQ(xcclCommDeregister(comm, lo), xcclSuccess);
    EXPECT_EQ(xcclCommDeregister(comm, lo), xcclInvalidArgument);
    EXPECT_EQ(xcclCommDeregister(comm, nullptr), xcclInvalidArgument);
    EXPECT_EQ(xcclCommDeregister(comm, plain.data()), xcclInvalidArgument);
    // The freed half can be registered again.
    ASSERT_EQ(xcclCommRegister(comm, mem + 4096, 4096, &lo), xcclSuccess);
    EXPECT_EQ(xcclCommDeregister(comm, lo), xcclSuccess);
    EXPECT_EQ(xcclCommDeregister(comm, hi), xcclSuccess);
    // The communicator still works.
    float x = 1.0f + rank;
    check(xcclAllReduce(&x, &x, 1, xcclFloat32, xcclSum, comm, nullptr), comm);
    xcclEvent_t ev;
    check(xcclEventRecord(&ev, comm), comm);
    check(xcclEventWait(&ev, -1), comm);
    EXPECT_EQ(x, 3.0f);
    check(xcclMemFree(mem));
    check(xcclCommDestroy(comm));
  });
}

// On an xdev communicator: device memory registers, host memory (even xcclMemAlloc's, which
// is the host device's) does not.
TEST(CommRegister, XdevCommunicatorsTakeDeviceMemoryOnly) {
  xccl_test::MemoryStore store;
  xccl_test::runThreads(2, [&](int rank) {
    ASSERT_EQ(xdevSetDevice(rank), xdevSuccess);
    xcclConfig_t cfg{};
    cfg.device = rank;
    cfg.deviceType = xcclDeviceXdev;
    cfg.timeout_ms = 30000;
    xcclComm_t comm = nullptr;
    check(xcclCommInitRankStore(&comm, 2, rank, store.c(), "regx/", &cfg), nullptr);
    void* dev = nullptr;
    ASSERT_EQ(xdevMalloc(&dev, 1 << 16), xdevSuccess);
    void *h = nullptr, *host = nullptr;
    check(xcclMemAlloc(&host, 1 << 16));
    EXPECT_EQ(xcclCommRegister(comm, host, 1 << 16, &h), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("device memory"), std::string::npos)
        << xcclGetLastError(nullptr);
    ASSERT_EQ(xcclCommRegister(comm, dev, 1 << 16, &h), xcclSuccess) << xcclGetLastError(nullptr);
    EXPECT_EQ(xcclCommDeregister(comm, h), xcclSuccess);
    check(xcclMemFree(host));
    xdevFree(dev);
    check(xcclCommDestroy(comm), nullptr);
  });
}

}  // namespace

namespace {

// What the rank-order left fold of `n` ranks' inputs gives for element i (input of rank r:
// value(r, i)), computed here as "mapped" must compute it: ((v0 op v1) op v2) ...
template <typename T, typename Op>
T foldOf(int n, size_t i, T (*value)(int, size_t), Op op) {
  T acc = value(0, i);
  for (int r = 1; r < n; ++r) acc = op(acc, value(r, i));
  return acc;
}

float floatValue(int r, size_t i) {
  return float(i % 97) * 0.1f + float(r) * 1e-3f + 1e-7f * float(i % 13);
}
int32_t intValue(int r, size_t i) {
  return int32_t((i * 2654435761u + r * 40503u) % 100003) - 50000;
}

}  // namespace

// "mapped" (forced), 3 processes, xcclMemAlloc buffers: float32 sums are the rank-order fold bit
// for bit and int32 max exact, in place and out of place, at sizes that leave a rank an empty
// slice (1 element), a ragged last slice, and slices large enough that the out-of-place
// results bypass the cache (streaming stores, >= 4 MiB a rank); bfloat16 (the blocked path of
// the kernel) against its fold in float32 rounded per step. Avg divides the mapped sum.
TEST(MemAlloc, MappedAllreduceIsTheRankOrderFoldInAndOutOfPlace) {
  ScopedEnv algo("XCCL_ALGO", "allreduce=mapped");
  const int n = 3;
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclComm_t comm = xccl_test::initProcessComm(id, n, rank);
        for (size_t count : {size_t(1), size_t(17), size_t(70001), (size_t(3) << 20) + 5}) {
          const size_t bytes = count * sizeof(float);
          float *a = nullptr, *b = nullptr;
          check(xcclMemAlloc(reinterpret_cast<void**>(&a), bytes));
          check(xcclMemAlloc(reinterpret_cast<void**>(&b), bytes));
          for (size_t i = 0; i < count; ++i) a[i] = floatValue(rank, i);
          check(xcclAllReduce(a, b, count, xcclFloat32, xcclSum, comm, XCCL_STREAM_CALLER), comm);
          check(xcclAllReduce(a, a, count, xcclFloat32, xcclSum, comm, XCCL_STREAM_CALLER), comm);
          for (size_t i = 0; i < count; ++i) {
            const float want =
                foldOf<float>(n, i, floatValue, [](float x, float y) { return x + y; });
            ASSERT_EQ(std::memcmp(&b[i], &want, 4), 0) << "out of place, " << count << " i " << i;
            ASSERT_EQ(std::memcmp(&a[i], &want, 4), 0) << "in place, " << count << " i " << i;
          }
          auto* x = reinterpret_cast<int32_t*>(a);
          auto* y = reinterpret_cast<int32_t*>(b);
          for (size_t i = 0; i < count; ++i) x[i] = intValue(rank, i);
          check(xcclAllReduce(x, y, count, xcclInt32, xcclMax, comm, XCCL_STREAM_CALLER), comm);
          for (size_t i = 0; i < count; ++i) {
            const int32_t want =
                foldOf<int32_t>(n, i, intValue, [](int32_t p, int32_t q) { return p < q ? q : p; });
            ASSERT_EQ(y[i], want) << "int32 max, " << count << " i " << i;
          }
          for (size_t i = 0; i < count; ++i) a[i] = float(3 * (i % 5) + rank);
          check(xcclAllReduce(a, a, count, xcclFloat32, xcclAvg, comm, XCCL_STREAM_CALLER), comm);
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(a[i], float(3 * (i % 5) + 1)) << "avg " << i;
          // bfloat16: 1, 2 and 4 are exact, so every step of the fold is too.
          auto* h = reinterpret_cast<uint16_t*>(a);
          const uint16_t bf[3] = {0x3f80, 0x4000, 0x4080};  // 1, 2, 4
          for (size_t i = 0; i < count; ++i) h[i] = bf[(i + rank) % 3];
          check(xcclAllReduce(h, h, count, xcclBfloat16, xcclSum, comm, XCCL_STREAM_CALLER), comm);
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(h[i], 0x40e0) << "bfloat16 (7) " << i;
          check(xcclMemFree(a));
          check(xcclMemFree(b));
        }
        check(xcclCommDestroy(comm));
      },
      180);
}

// Buffers one rank cannot share: by default every rank learns it in the meeting and takes the
// rings instead (right sums); with "mapped" forced, every rank's operation fails naming the rank.
TEST(MemAlloc, MappedFallsBackTogetherOrRefusesWhenForced) {
  ScopedEnv min("XCCL_PEER_READ_MIN", "64");
  const int n = 2;
  const size_t count = 100000;
  for (bool forced : {false, true}) {
    ScopedEnv algo("XCCL_ALGO", forced ? "allreduce=mapped" : "");
    xcclUniqueId id;
    ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
    xccl_test::runProcesses(
        n,
        [&](int rank) {
          xcclComm_t comm = xccl_test::initProcessComm(id, n, rank);
          std::vector<float> heap;
          float* a = nullptr;
          if (rank == 0) {
            check(xcclMemAlloc(reinterpret_cast<void**>(&a), count * sizeof(float)));
          } else {
            heap.resize(count);
            a = heap.data();
          }
          for (size_t i = 0; i < count; ++i) a[i] = float(i % 7 + rank);
          xcclResult_t r =
              xcclAllReduce(a, a, count, xcclFloat32, xcclSum, comm, XCCL_STREAM_CALLER);
          if (!forced) {
            ASSERT_EQ(r, xcclSuccess) << xcclGetLastError(comm);
            for (size_t i = 0; i < count; ++i) ASSERT_EQ(a[i], float(2 * (i % 7) + 1)) << i;
            // Later calls skip the meeting for a while (the same ones on every rank), then
            // meet again: with both buffers mappable now, every call still sums right.
            float* b = nullptr;
            check(xcclMemAlloc(reinterpret_cast<void**>(&b), count * sizeof(float)));
            for (int call = 0; call < 12; ++call) {
              float* buf = call % 4 == 3 ? b : a;
              for (size_t i = 0; i < count; ++i) buf[i] = float(i % 5 + rank + call);
              check(xcclAllReduce(buf, buf, count, xcclFloat32, xcclSum, comm, XCCL_STREAM_CALLER),
                    comm);
              for (size_t i = 0; i < count; ++i) {
                ASSERT_EQ(buf[i], float(2 * (i % 5 + call) + 1)) << "call " << call << " i " << i;
              }
            }
            check(xcclMemFree(b));
          } else {
            EXPECT_EQ(r, xcclInvalidUsage);
            const std::string why = xcclGetLastError(comm);
            EXPECT_NE(why.find("rank 1's buffers"), std::string::npos) << why;
          }
          if (rank == 0) check(xcclMemFree(a));
          xcclCommDestroy(comm);
        },
        120);
  }
}
