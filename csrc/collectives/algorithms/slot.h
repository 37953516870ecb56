// "slot": small allreduces between the processes of one host through a slot of shared memory
// per rank (slot.cc). The communicator's slots are made by its first slot allreduce and kept
// by its Exchange.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace xccl {

class Exchange;
struct CollArgs;

namespace algo {

struct SlotArea;

struct SlotAreaDeleter {
  void operator()(SlotArea* a) const;
};
using SlotAreaPtr = std::unique_ptr<SlotArea, SlotAreaDeleter>;

// The largest allreduce (bytes) a slot carries on a host of `localRanks` ranks whose processes
// may run on `cores` CPUs at least (0: the slot path is off): XCCL_SLOT_MAX when set, else
// 8 KiB, or 64 KiB when the ranks outnumber the cores. Oversubscribed, every step an engine
// schedule takes needs the peer it waits for to get a core; the slot's single meeting point
// wins up to 64 KiB there (4 ranks on 2 cores: 16 KiB 11 against 14-42 us, 64 KiB 31-33
// against 37-90 us), where with a core per rank the engine's pipelined copies win from
// 16 KiB (BENCHMARKS.md section 22).
size_t slotMaxBytes(int localRanks, int cores);
// After a failure of this rank's communicator: its slots say so, so that a peer waiting on
// them fails at once instead of at its deadline.
void markSlotsFailed(SlotArea& area, const std::string& why);

bool slotSupports(const CollArgs& args, const Exchange& ex);
void slotRun(Exchange& ex, const CollArgs& args);

// "mapped": allreduces on one host whose buffers every rank can map (xcclMemAlloc memory,
// xdev device memory). The ranks meet in their slots, where each puts references to its
// buffers; each rank then folds its 1/n of the elements in rank order straight out of every
// rank's input and writes the result into every rank's output, and raises its done word: one
// read and one write of the buffer per rank, as a memcpy moves (the two-pass alternative,
// reduce-scatter by peer reads and then allgather by peer reads, moves 1.5 times that).
// When some rank's buffers cannot be mapped every rank runs the next algorithm of the
// tuning order instead (selectAlgorithmAfter).
bool mappedSupports(const CollArgs& args, const Exchange& ex);
void mappedRun(Exchange& ex, const CollArgs& args);

}  // namespace algo
}  // namespace xccl
