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

// The largest allreduce (bytes) a slot carries (XCCL_SLOT_MAX; 0: the slot path is off).
size_t slotMaxBytes();
// After a failure of this rank's communicator: its slots say so, so that a peer waiting on
// them fails at once instead of at its deadline.
void markSlotsFailed(SlotArea& area, const std::string& why);

bool slotSupports(const CollArgs& args, const Exchange& ex);
void slotRun(Exchange& ex, const CollArgs& args);

}  // namespace algo
}  // namespace xccl
