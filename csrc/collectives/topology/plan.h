// Planning from the topology: which ranks share a host, the rings (channels) the ring
// algorithms follow and the host hierarchy the hierarchical algorithms follow. Pure
// functions of a System and where each rank runs, so they are unit-tested over systems we
// do not have (tests/cpp/test_topology_plan.cc) and printed by `xccl-topo rings`.
//
// Rings: the ranks of one host form one contiguous run of the ring, so a ring over H hosts
// crosses the network exactly H times (the minimum: every host is entered and left once).
// Within a host the run is the order that keeps the slowest link on it as fast as possible
// (the bottleneck), found exactly for up to 16 ranks per host (a search over subsets per
// candidate bandwidth) and greedily above; when ascending rank order is as good, it is kept.
// Hosts follow each other in the order of their lowest rank. Channel c > 0 is channel 0
// run backwards (it uses the other direction of every full-duplex link).
//
//   ranks 0(A) 1(B) 2(A) 3(B)  ->  ring 0 2 1 3 (A A B B), 2 network hops, not 4
//   8 devices, islands {0-3} {4-7} joined by one XL link 3-4:  0 1 2 3 4 5 6 7 (XL only)
#pragma once

#include <string>
#include <vector>

#include "system.h"

namespace xccl {
namespace topo {

// Where a rank runs: a host of the System and a device on it (global index; -1 for ranks
// without a device, e.g. CPU tensors, which are joined by shared memory as PHB).
struct Place {
  int host = 0;
  int device = -1;
};

struct Plan {
  std::vector<int> hostOf;              // rank -> plan host (0 = the host of rank 0)
  std::vector<std::vector<int>> hosts;  // plan host -> its ranks, in ring order
  std::vector<int> systemHost;          // plan host -> index in System::hosts
  std::vector<std::vector<int>> rings;  // channels; each a permutation of the ranks
  int networkHops = 0;                  // per ring: edges whose ends are on two hosts
  double bottleneckGBs = 0;             // the slowest edge of ring 0
  LinkKind bottleneckKind = LinkKind::kSelf;
  bool uniformHosts = true;  // every host holds as many ranks as the others

  int nranks() const { return static_cast<int>(hostOf.size()); }
  const std::vector<int>& ring() const { return rings.front(); }
  // The rank's index within its host's run (the "local rank" of hierarchical schedules).
  int localIndex(int rank) const;
};

// Plans for ranks placed at `places` in `sys` with up to `channels` rings (at least 1).
Plan planRanks(const System& sys, const std::vector<Place>& places, int channels = 1);

// The link between ranks a and b as the planner sees it.
Path rankPath(const System& sys, const std::vector<Place>& places, int a, int b);

// A System of `hosts` hosts and no devices: what the planner knows when only host
// identities are known (no detection, or detection failed somewhere).
System systemOfHosts(int hosts);

}  // namespace topo
}  // namespace xccl
