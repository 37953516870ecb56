// Text and pictures of a topology: the `nvidia-smi topo -m`-style matrix of a host, the
// per-rank matrix a communicator logs at XCCL_DEBUG=INFO (XCCL_DEBUG_SUBSYS=TOPO), the plan
// (rings, hierarchy) and a self-contained HTML page that draws the system (xccl-topo show).
#pragma once

#include <string>
#include <vector>

#include "plan.h"
#include "system.h"

namespace xccl {
namespace topo {

// One host's devices and NICs against each other, NUMA affinity, and the legend.
std::string hostMatrix(const System& sys, int host);
// The legend of link kinds (also part of hostMatrix()).
std::string legend();
// Ranks against ranks (X, XL, PIX, ..., NET), each rank's host and device, then the rings.
std::string rankMatrix(const System& sys, const std::vector<Place>& places, const Plan& plan);
// Ranks, rings (channels) with network hops and bottleneck, and the host hierarchy.
std::string planText(const System& sys, const std::vector<Place>& places, const Plan& plan);
// An HTML page (inline SVG, no scripts or fetches) drawing hosts, devices, links by kind,
// NICs and the network; with a plan, ring 0 as numbered arrows.
std::string htmlPage(const System& sys, const std::vector<Place>* places, const Plan* plan);

}  // namespace topo
}  // namespace xccl
