// FlightJson.hpp — the flight recorder's dump as JSON text (flight::json, declared in
// FlightDump.hpp; docs/RELIABILITY.md, "Flight recorder", has the format), and who this
// process is, which the JSON states and the dump's file name and the peers' request repeat.
#pragma once

#include <string>
#include <vector>

#include "FlightRecorder.hpp"

namespace torch_xccl {
namespace flight {

struct Identity {
  long long rank = -1;  // global; -1: not known
  long long worldSize = -1;
};

// The default group (no global ranks: they are its own) knows best; then the launcher's
// environment (RANK, WORLD_SIZE); then any group's list of global ranks.
Identity identity(const std::vector<FlightGroup>& groups);

}  // namespace flight
}  // namespace torch_xccl
