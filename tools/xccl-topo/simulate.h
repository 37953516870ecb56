// xccl-topo simulate: the cost model (collectives/algorithms/cost.h) run over a planned
// system, with the selector's pick beside the model's best (docs/SIMULATOR.md).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/topology/plan.h"
#include "collectives/topology/system.h"

namespace xccl_topo {

struct SimulateOptions {
  std::string coll = "allreduce";
  std::vector<size_t> sizes;  // bytes of the whole buffer
  std::string paramsFile;     // "key value" cost parameters; empty: the defaults
  double cores = -1;          // usable cores per host; < 0: the parameters' value
  bool json = false;          // one JSON object: features, predictions, picks
};

// "8,64K,1M,256M" (K, M, G: powers of 1024). Throws InvalidArgument.
std::vector<size_t> parseSizes(const std::string& text);
// `one`'s first host copied `hosts` times (a cluster of like hosts): its devices, NICs and
// links, named <name>-<i>.
xccl::topo::System replicateHosts(const xccl::topo::System& one, int hosts);
std::string simulate(const xccl::topo::System& sys, const std::vector<xccl::topo::Place>& places,
                     const SimulateOptions& opt);

}  // namespace xccl_topo
