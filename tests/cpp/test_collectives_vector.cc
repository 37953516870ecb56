// Uneven collectives: xcclAllGatherv and xcclReduceScatterv with blocks of different sizes
// (zero among them) at displacements with gaps, out of place and in place, as threads and
// as processes; gaps left untouched; ranks that disagree on a size fail instead of hanging;
// bad arguments refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_util.h"
#include "xccl.h"

namespace {

using xccl_test::check;

// Block sizes: rank 1's is empty, the others differ.
std::vector<size_t> countsFor(int n, size_t scale) {
  std::vector<size_t> c(n);
  for (int i = 0; i < n; ++i) c[i] = i == 1 ? 0 : scale * (3 + 2 * i) + i;
  return c;
}

// Displacements with a gap of 5 elements before every block.
std::vector<size_t> displsFor(const std::vector<size_t>& counts, size_t* total) {
  std::vector<size_t> d(counts.size());
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    at += 5;
    d[i] = at;
    at += counts[i];
  }
  *total = at + 5;
  return d;
}

float valueOf(int rank, size_t i) { return float(rank * 1000 + int(i % 997)); }

void waitAll(xcclComm_t comm) {
  xcclEvent_t ev;
  check(xcclEventRecord(&ev, comm), comm);
  check(xcclEventWait(&ev, -1), comm);
}

void checkAllGatherv(xcclComm_t comm, int rank, int n, size_t scale, bool inPlace) {
  const auto counts = countsFor(n, scale);
  size_t total = 0;
  const auto displs = displsFor(counts, &total);
  std::vector<float> out(total, -1.0f), in(counts[rank]);
  for (size_t i = 0; i < in.size(); ++i) in[i] = valueOf(rank, i);
  const float* send = in.data();
  if (inPlace) {
    std::copy(in.begin(), in.end(), out.begin() + displs[rank]);
    send = out.data() + displs[rank];
  }
  check(xcclAllGatherv(send, counts[rank], out.data(), counts.data(), displs.data(), xcclFloat32,
                       comm, nullptr),
        comm);
  waitAll(comm);
  std::vector<bool> inBlock(total, false);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < counts[r]; ++i) {
      ASSERT_EQ(out[displs[r] + i], valueOf(r, i))
          << "rank " << rank << " block " << r << " i " << i;
      inBlock[displs[r] + i] = true;
    }
  }
  for (size_t j = 0; j < total; ++j) {
    if (!inBlock[j]) ASSERT_EQ(out[j], -1.0f) << "gap element " << j << " written";
  }
}

template <typename T>
void checkReduceScatterv(xcclComm_t comm, int rank, int n, size_t scale, xcclDataType_t dtype,
                         xcclRedOp_t op, bool inPlace) {
  const auto counts = countsFor(n, scale);
  size_t total = 0;
  const auto displs = displsFor(counts, &total);
  std::vector<T> in(total, T(-7));
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < counts[b]; ++i) in[displs[b] + i] = T(rank + 1 + (i % 13));
  }
  std::vector<T> out(counts[rank] + 1, T(-9));
  T* recv = inPlace ? in.data() + displs[rank] : out.data();
  check(xcclReduceScatterv(in.data(), recv, counts.data(), displs.data(), dtype, op, comm, nullptr),
        comm);
  waitAll(comm);
  for (size_t i = 0; i < counts[rank]; ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) {
      const double v = r + 1 + double(i % 13);
      want = r == 0 ? v : op == xcclMax ? std::max(want, v) : want + v;
    }
    if (op == xcclAvg) want /= n;
    ASSERT_EQ(double(recv[i]), double(T(want))) << "rank " << rank << " op " << op << " i " << i;
  }
  if (!inPlace) ASSERT_EQ(out[counts[rank]], T(-9)) << "written past the block";
}

class VectorColl : public testing::TestWithParam<int> {};

TEST_P(VectorColl, ThreadsEveryShapeAndInPlace) {
  const int n = GetParam();
  xccl_test::MemoryStore store;
  xccl_test::runThreads(n, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, n, rank, "vec/");
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE(inPlace ? "in place" : "out of place");
      checkAllGatherv(comm, rank, n, 7, inPlace);
      checkAllGatherv(comm, rank, n, 20000, inPlace);  // 60-180 KiB blocks: several slices
      checkReduceScatterv<float>(comm, rank, n, 9, xcclFloat32, xcclSum, inPlace);
      checkReduceScatterv<float>(comm, rank, n, 30000, xcclFloat32, xcclAvg, inPlace);
      checkReduceScatterv<int32_t>(comm, rank, n, 11, xcclInt32, xcclMax, inPlace);
    }
    check(xcclCommDestroy(comm));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, VectorColl, testing::Values(1, 2, 3, 4),
                         [](const testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "ranks";
                         });

TEST(VectorColl, ProcessesWithLargeUnevenBlocks) {
  const int n = 3;
  xcclUniqueId id;
  ASSERT_EQ(xcclGetUniqueId(&id), xcclSuccess);
  xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclComm_t comm = xccl_test::initProcessComm(id, n, rank);
        checkAllGatherv(comm, rank, n, 300000, false);  // 1-3 MiB blocks
        checkReduceScatterv<float>(comm, rank, n, 250000, xcclFloat32, xcclSum, true);
        check(xcclCommDestroy(comm));
      },
      120);
}

// Rank 0 believes rank 2's block is one element shorter than rank 2 sends: rank 0 fails
// (size mismatch) instead of hanging or writing past the block.
TEST(VectorColl, RanksThatDisagreeOnASizeFail) {
  const int n = 3;
  xccl_test::MemoryStore store;
  xccl_test::runThreads(n, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, n, rank, "vecbad/", 20000);
    std::vector<size_t> counts = {4, 4, 4}, displs = {0, 4, 8};
    if (rank == 0) counts[2] = 3;
    std::vector<float> in(4, 1.0f), out(12, 0.0f);
    xcclResult_t r = xcclAllGatherv(in.data(), 4, out.data(), counts.data(), displs.data(),
                                    xcclFloat32, comm, nullptr);
    if (r == xcclSuccess) {
      xcclEvent_t ev;
      r = xcclEventRecord(&ev, comm);
      if (r == xcclSuccess) r = xcclEventWait(&ev, -1);
    }
    // Rank 0 receives 16 bytes where it expects 12; the others may have finished before it
    // failed (their messages all matched), or hear of it.
    if (rank == 0) {
      EXPECT_EQ(r, xcclRemoteError);
      EXPECT_NE(std::string(xcclGetLastError(comm)).find("size mismatch"), std::string::npos)
          << xcclGetLastError(comm);
      EXPECT_EQ(out[11], 0.0f);  // never past its idea of block 2
    }
    xcclCommAbort(comm);
  });
}

TEST(VectorColl, BadArgumentsAreRefused) {
  xccl_test::MemoryStore store;
  xccl_test::runThreads(2, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, 2, rank, "vecarg/");
    std::vector<size_t> counts = {2, 2}, displs = {0, 2};
    float buf[4] = {};
    EXPECT_EQ(xcclAllGatherv(buf, 2, buf, nullptr, displs.data(), xcclFloat32, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_EQ(xcclAllGatherv(buf, 3, buf, counts.data(), displs.data(), xcclFloat32, comm, nullptr),
              xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("recvcounts[" + std::to_string(rank)),
              std::string::npos)
        << xcclGetLastError(nullptr);
    EXPECT_EQ(xcclReduceScatterv(buf, buf, counts.data(), displs.data(), xcclFloat32, xcclPremulSum,
                                 comm, nullptr),
              xcclInvalidArgument);
    std::vector<size_t> huge = {SIZE_MAX / 2, 1};
    EXPECT_EQ(xcclReduceScatterv(buf, buf, huge.data(), displs.data(), xcclFloat32, xcclSum, comm,
                                 nullptr),
              xcclInvalidArgument);
    check(xcclCommDestroy(comm));
  });
}

}  // namespace
