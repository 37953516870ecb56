// Topology: which ranks share a host, and the ring order the algorithms follow.
//
// Pure functions of the peers' host identities, so they are unit-tested without any
// communication. The ring visits hosts in order of their lowest rank and, within a host,
// ranks in ascending order: a ring over H hosts crosses the network exactly H times
// (the minimum), and every other hop is shared memory.
//
//   ranks:  0(A) 1(B) 2(A) 3(B)   ->  ring 0 2 1 3 (A A B B), 2 network hops, not 4
#pragma once

#include <string>
#include <vector>

namespace xccl {

struct Topology {
  std::vector<int> hostOf;              // rank -> host index (0 = host of rank 0)
  std::vector<std::vector<int>> hosts;  // host index -> its ranks, ascending
  std::vector<int> ring;                // ranks in ring order
  int networkHops = 0;                  // ring edges whose ends are on different hosts
};

// hostIds[r] is rank r's host identity (equal strings = same host).
Topology buildTopology(const std::vector<std::string>& hostIds);

// A printable matrix like `nvidia-smi topo -m`: one row per rank, SELF / SHM / NET per
// peer, then the ring. transportOf(r, p) names the transport between r and p.
std::string describeTopology(const Topology& topo, const std::vector<std::string>& hostnames,
                             const std::vector<std::vector<std::string>>& transport);

}  // namespace xccl
