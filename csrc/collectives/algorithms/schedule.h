// Helpers shared by the algorithm files (internal to algorithms/): temporaries in device
// memory, the element-aligned partition of a buffer into blocks and slices, and the
// per-file algorithm lists that select.cc concatenates into the registry.
//
// Words used by every schedule:
//   block - one of nranks element-aligned parts of a buffer (the first count % nranks
//           blocks hold one extra element, so an uneven last block is fine);
//   slice - a piece of a block sent as one message (XCCL_RING_SLICE bytes);
//   chunk - a piece of a whole buffer pipelined along a chain (XCCL_CHAIN_CHUNK bytes);
//   step  - one round of "post sends and receives, then wait()".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithm.h"
#include "collectives/device/device.h"
#include "common/error.h"
#include "common/param.h"

namespace xccl {
namespace algo {

// Device memory owned for the duration of one collective (given back on every exit path);
// small ones come from the engine's reused temporaries (Exchange::takeScratch).
class DeviceBuffer {
 public:
  DeviceBuffer(Exchange& ex, size_t bytes) : ex_(ex) {
    if (bytes > 0) s_ = ex.takeScratch(bytes);
  }
  ~DeviceBuffer() {
    if (s_.ptr != nullptr) ex_.giveScratch(s_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get() const { return s_.ptr; }

 private:
  Exchange& ex_;
  Exchange::Scratch s_;
};

inline char* at(void* base, size_t byteOffset) { return static_cast<char*>(base) + byteOffset; }
inline const char* at(const void* base, size_t byteOffset) {
  return static_cast<const char*>(base) + byteOffset;
}

// count elements split into nblocks element-aligned blocks; block i starts at first(i).
struct Blocks {
  size_t count;
  int nblocks;
  size_t first(int i) const {
    size_t base = count / nblocks, extra = count % nblocks;
    return base * i + std::min<size_t>(i, extra);
  }
  size_t size(int i) const { return count / nblocks + (static_cast<size_t>(i) < count % nblocks); }
};

// Calls fn(firstElem, elems) for consecutive pieces of at most pieceBytes bytes (at least
// one element each) covering elems elements. Sender and receiver call it with the same
// arguments, so both see the same message boundaries.
template <typename Fn>
void forEachPiece(size_t elems, size_t elemSize, size_t pieceBytes, Fn&& fn) {
  size_t per = std::max<size_t>(1, pieceBytes / elemSize);
  for (size_t done = 0; done < elems; done += per) fn(done, std::min(per, elems - done));
}

// A piece-size knob: a positive value is bytes per message (at least one element is always
// sent); 0 or less means no cutting, one message for the whole block.
inline size_t pieceBytesKnob(int64_t value) {
  return value <= 0 ? SIZE_MAX : static_cast<size_t>(value);
}

// Whether a "direct" reduction may hold one `bytes` buffer per rank in a temporary
// (XCCL_DIRECT_TEMP_MAX); the direct algorithms decline (and the selector falls back) when
// it would not.
inline bool directTempFits(const Exchange& ex, size_t bytes, int nranks) {
  return bytes * static_cast<size_t>(nranks) <= static_cast<size_t>(ex.tuning().directTempMax);
}

// (a mod n) for possibly negative a.
inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Per-file algorithm lists (defined in the file named after the collective).
std::vector<Algorithm> allreduceAlgorithms();      // allreduce.cc
std::vector<Algorithm> broadcastAlgorithms();      // broadcast.cc
std::vector<Algorithm> reduceAlgorithms();         // reduce.cc
std::vector<Algorithm> allgatherAlgorithms();      // allgather.cc
std::vector<Algorithm> reduceScatterAlgorithms();  // reduce_scatter.cc
std::vector<Algorithm> alltoallAlgorithms();       // alltoall.cc
std::vector<Algorithm> gatherScatterAlgorithms();  // gather_scatter.cc
std::vector<Algorithm> barrierAlgorithms();        // barrier.cc
std::vector<Algorithm> orderedAlgorithms();        // ordered.cc (several collectives)

// The nranks inputs of a fold in rank order: dst = ((in[0] op in[1]) op in[2]) ..., so every
// rank that folds the same inputs gets bit-identical results. in[me] is `mine` (read in
// place) and every other rank's input gets a fresh slot of `bytes` in a device temporary.
// When dst == mine and me != 0 the fold would overwrite mine before reaching it, so mine is
// copied into a slot of its own first.
class FoldInputs {
 public:
  FoldInputs(Exchange& ex, int nranks, int me, const void* mine, const void* dst, size_t bytes);
  // Where rank r's input is to be received (r != me).
  char* slot(int r) const { return slots_[r]; }
  // dst = fold of all inputs (dst may alias in[0] only, which the constructor ensures).
  void fold(void* dst, size_t count, xcclDataType_t dtype, xcclRedOp_t op) const;

 private:
  Device& device_;
  DeviceBuffer temp_;
  std::vector<char*> slots_;
  std::vector<const void*> in_;
};

}  // namespace algo
}  // namespace xccl
