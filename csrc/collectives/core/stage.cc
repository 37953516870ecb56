// Staging an operation through host memory (Device::stagesThroughHost, device.h): the ranges
// of device memory a call reads and writes, gathered into pinned host memory on the caller's
// stream before the operation and copied back after its hold, with the call's pointers moved
// onto the host copy. The engine then runs on host memory alone.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "collectives/device/device.h"
#include "comm.h"

namespace xccl {
namespace {

// One range of device memory a call touches: read (an input), written (an output), or, for a
// vector collective, the span from its buffer's base to the end of its last block, which
// keeps the base and every block in one region of the host copy.
enum class Use { kIn, kOut, kSpan };
struct Range {
  const char* dev;
  size_t bytes;
  Use use;
};

// The ranges of one call on this rank, in bytes: what NCCL's semantics make it read and
// write (a non-root's broadcast input, reduce output, gather output and scatter input are
// not touched). Vector collectives name each block, so the holes between blocks of an
// output are never written back.
void rangesOf(const CollArgs& a, int rank, int nranks, std::vector<Range>* out) {
  const size_t es = dtypeSize(a.dtype);
  const auto* send = static_cast<const char*>(a.sendbuf);
  const auto* recv = static_cast<const char*>(a.recvbuf);
  const size_t n = static_cast<size_t>(nranks);
  const size_t block = a.count * es;
  auto add = [&](const char* p, size_t bytes, Use use) {
    if (p != nullptr && bytes != 0) out->push_back({p, bytes, use});
  };
  // Blocks of a vector collective at element displacements from base, and their span.
  auto blocks = [&](const char* base, const std::vector<size_t>& displs,
                    const std::vector<size_t>& counts, Use use) {
    size_t end = 0;
    for (size_t p = 0; p < n; ++p) {
      if (counts[p] == 0) continue;
      add(base + displs[p] * es, counts[p] * es, use);
      end = std::max(end, (displs[p] + counts[p]) * es);
    }
    add(base, end, Use::kSpan);
  };
  const bool root = a.root == rank;
  switch (a.type) {
    case CollType::kAllReduce:
      add(send, block, Use::kIn);
      add(recv, block, Use::kOut);
      break;
    case CollType::kBroadcast:
      if (root) add(send, block, Use::kIn);
      add(recv, block, Use::kOut);
      break;
    case CollType::kReduce:
      add(send, block, Use::kIn);
      if (root) add(recv, block, Use::kOut);
      break;
    case CollType::kAllGather:
      add(send, block, Use::kIn);
      add(recv, block * n, Use::kOut);
      break;
    case CollType::kReduceScatter:
      add(send, block * n, Use::kIn);
      add(recv, block, Use::kOut);
      break;
    case CollType::kAllToAll:
      add(send, block * n, Use::kIn);
      add(recv, block * n, Use::kOut);
      break;
    case CollType::kGather:
      add(send, block, Use::kIn);
      if (root) add(recv, block * n, Use::kOut);
      break;
    case CollType::kScatter:
      if (root) add(send, block * n, Use::kIn);
      add(recv, block, Use::kOut);
      break;
    case CollType::kSend:
      add(send, block, Use::kIn);
      break;
    case CollType::kRecv:
    case CollType::kRecvAny:
      add(recv, block, Use::kOut);
      break;
    case CollType::kBarrier:
      break;
    case CollType::kAllToAllv:
      blocks(send, a.sdispls, a.sendcounts, Use::kIn);
      blocks(recv, a.rdispls, a.recvcounts, Use::kOut);
      break;
    case CollType::kAllGatherv:
      add(send, block, Use::kIn);
      blocks(recv, a.rdispls, a.recvcounts, Use::kOut);
      break;
    case CollType::kReduceScatterv:
      blocks(send, a.sdispls, a.recvcounts, Use::kIn);
      add(recv, a.recvcounts[static_cast<size_t>(rank)] * es, Use::kOut);
      break;
  }
}

}  // namespace

void stageOperation(Device& device, Device& engine, int rank, int nranks, OpEntry& op) {
  // Every call's ranges, and whether the call reads / writes any on this rank: a buffer it
  // reads or writes begins a range or a span; one it does not touch keeps its address, unused.
  std::vector<Range> ranges;
  std::vector<std::pair<bool, bool>> touches;  // (reads, writes) per call, colls then p2p
  for (auto* list : {&op.colls, &op.p2p}) {
    for (const CollArgs& a : *list) {
      const size_t first = ranges.size();
      rangesOf(a, rank, nranks, &ranges);
      bool reads = false, writes = false;
      for (size_t i = first; i < ranges.size(); ++i) {
        reads = reads || ranges[i].use == Use::kIn;
        writes = writes || ranges[i].use == Use::kOut;
      }
      touches.emplace_back(reads, writes);
    }
  }
  // Overlapping ranges (in place, an input inside its output) share one region of the host
  // copy, so the call's aliasing survives the move. Each region keeps its device address's
  // offset within 64 bytes, so elements stay as aligned as the caller made them.
  struct Region {
    const char* begin;
    const char* end;
    size_t offset = 0;  // of `begin` in the host copy
  };
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& x, const Range& y) { return x.dev < y.dev; });
  std::vector<Region> regions;
  for (const Range& r : ranges) {
    if (!regions.empty() && r.dev < regions.back().end) {
      regions.back().end = std::max(regions.back().end, r.dev + r.bytes);
    } else {
      regions.push_back({r.dev, r.dev + r.bytes});
    }
  }
  size_t total = 0;
  for (Region& g : regions) {
    const size_t misalign = reinterpret_cast<uintptr_t>(g.begin) % 64;
    total = (total + 63) / 64 * 64 + misalign;
    g.offset = total;
    total += static_cast<size_t>(g.end - g.begin);
  }
  char* host = device.stageBegin(op.stream, total, engine);
  auto hostOf = [&](const void* p) -> char* {
    const auto* c = static_cast<const char*>(p);
    auto it = std::upper_bound(regions.begin(), regions.end(), c,
                               [](const char* x, const Region& g) { return x < g.begin; });
    --it;  // every pointer asked for begins a range, so some region starts at or before it
    return host + it->offset + static_cast<size_t>(c - it->begin);
  };
  std::vector<Device::StageCopy> in, out;
  for (const Range& r : ranges) {
    if (r.use == Use::kIn) in.push_back({hostOf(r.dev), r.dev, r.bytes});
    if (r.use == Use::kOut) out.push_back({const_cast<char*>(r.dev), hostOf(r.dev), r.bytes});
  }
  // The calls' pointers move onto the host copy.
  size_t call = 0;
  for (auto* list : {&op.colls, &op.p2p}) {
    for (CollArgs& a : *list) {
      const auto [reads, writes] = touches[call++];
      if (reads) a.sendbuf = hostOf(a.sendbuf);
      if (writes) a.recvbuf = hostOf(a.recvbuf);
    }
  }
  device.stageIn(op.stream, in);
  device.stageOut(std::move(out));
}

}  // namespace xccl
