// FlightDump.hpp — when and where the flight recorder (FlightRecorder.hpp) is written.
//
// One JSON file per process, $TORCH_XCCL_TRACE_DIR/rank_<global rank>.json (default
// /tmp/xccl_trace/<job>/, <job> from SLURM_JOB_ID or TORCHELASTIC_RUN_ID, else "default"),
// written (atomically: a temporary file, then rename) when
//   - an operation of this process fails or times out, or a group is aborted: at most once
//     per process, before the failed Work reports its error, so the file exists when the
//     error reaches Python. The process then sets the key "xccl_fr/dump" in each of its
//     groups' stores and, at exit, waits (at most 3 s) until every member has dumped;
//   - a peer asked for it: every process looks for that key once a second (a thread of its
//     own), in its default group's store, else in its groups' stores in turn. This is how a
//     rank that is behind (busy outside xccl, so failing nothing) still writes its record.
//     It counts as the once-per-process automatic dump, as the first item does;
//   - the process receives SIGUSR1 (the handler only writes a byte to a pipe; a thread
//     reads it and dumps; installed only where SIGUSR1 still has its default action);
//   - Python asks: torch_xccl.dump_flight_record(path=None).
// The analyser is torch_xccl/fr_trace.py (`python -m torch_xccl.fr_trace DIR`).
//
// Files: FlightDump.cpp (the file), FlightJson.cpp (its text), FlightTriggers.cpp (addGroup,
// retire, aborted: the triggers above, their threads and the peers' requests).
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace torch_xccl {
namespace flight {

// Registers a process group with the recorder; with the first group, starts the SIGUSR1 and
// peer-request threads. Returns the group's index for FlightIssue::group.
uint32_t addGroup(const std::string& name, int rank, int size,
                  const std::vector<uint64_t>& globalRanks,
                  const c10::intrusive_ptr<c10d::Store>& store);
// The operation behind entry `id` ended (FlightRecorder::retire); on the process's first
// failure or timeout, writes the dump before returning and asks the peers to dump. Never
// throws.
void retire(uint64_t id, const std::exception_ptr& error, bool timedOut) noexcept;
// A process group is being aborted: the automatic dump (once per process).
void aborted(const std::string& group) noexcept;
// Writes the dump now: to `path` (a file, or an existing directory to put rank_<r>.json
// in), or to the default file when empty. Returns the file written; throws on I/O errors.
std::string dump(const std::string& path, const std::string& reason);
// The dump's JSON text (FlightJson.cpp).
std::string json(const std::string& reason);
// Where dumps go by default: $TORCH_XCCL_TRACE_DIR/rank_<r>.json.
std::string defaultPath();

}  // namespace flight
}  // namespace torch_xccl
