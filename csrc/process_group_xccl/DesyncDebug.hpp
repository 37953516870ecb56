// DesyncDebug.hpp — TORCH_XCCL_DESYNC_DEBUG=1: which rank is behind when a collective fails.
//
// libxccl already fails every collective whose ranks disagree, naming both calls (frame
// headers carry each rank's call). What it cannot see is a rank that never arrives: the
// others time out. In this debug mode every rank publishes, per issued collective, its
// sequence number and a description under "xccl_desync/<rank>" in the group's store; when an
// operation fails, the error gains a report that reads every rank's record and says who is
// behind (has not issued the failed collective), who issued something else at that number,
// and who did not report. It costs one store write per collective (a TCP round trip), so it
// is off by default, as TORCH_NCCL_DESYNC_DEBUG is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace torch_xccl {

class DesyncDebugger {
 public:
  // Null unless TORCH_XCCL_DESYNC_DEBUG is set to a non-zero value.
  static std::shared_ptr<DesyncDebugger> fromEnv(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                 int size);

  DesyncDebugger(c10::intrusive_ptr<c10d::Store> store, int rank, int size);
  // After collective #seq was issued on this rank. Never throws (a debug aid must not fail
  // the operation): store errors are noted in the next report.
  void recordIssued(uint64_t seq, const std::string& call) noexcept;
  // The report appended to the error of failed collective #seq (waits at most ~2 s in total
  // for other ranks' records to appear).
  std::string report(uint64_t seq) noexcept;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, size_;
  std::string lastCall_;
  std::string storeError_;
};

}  // namespace torch_xccl
