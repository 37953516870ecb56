// What a communicator knows of its topology: the System (detected, or read from
// XCCL_TOPO_FILE), where each rank runs in it, and the plan (rings, hosts) the algorithms
// follow. buildCommTopology() is a pure function of what the ranks exchanged, so every rank
// computes the same plan and tests run it without any communication.
//
// Sources, in order: XCCL_TOPO_FILE (the file's host h is the communicator's host h, hosts
// numbered by their lowest rank; a rank's device is its device ordinal on that host), else
// the hosts' own detections (each host's lowest rank detects it, detect.h, and publishes it
// through the bootstrap store), else host identities only (every rank on one host joined by
// shared memory).
#pragma once

#include <string>
#include <vector>

#include "plan.h"
#include "system.h"

namespace xccl {

struct CommTopology {
  topo::System system;
  std::vector<topo::Place> places;  // by rank
  topo::Plan plan;
  std::string source;  // "XCCL_TOPO_FILE=<path>", "detected", "host identities"
};

// hostIds[r]: rank r's host identity; deviceOrdinals[r]: its device ordinal on its host (-1:
// none); hostTexts[h]: the detected description (topo_file.h format, one host) of the
// communicator's host h, or "" when not known. Throws InvalidArgument when topoFile cannot be
// used for these ranks (too few hosts, a device the file lacks).
CommTopology buildCommTopology(const std::vector<std::string>& hostIds,
                               const std::vector<int>& deviceOrdinals,
                               const std::vector<std::string>& hostTexts,
                               const std::string& topoFile);

// Communicator host index of every rank (0 = the host of rank 0, numbered by lowest rank).
std::vector<int> hostIndexOf(const std::vector<std::string>& hostIds);

}  // namespace xccl
