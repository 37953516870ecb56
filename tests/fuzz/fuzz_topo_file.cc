// Topology files (XCCL_TOPO_FILE, topology/topo_file.cc): any text gives a System or
// InvalidArgument; a parsed System formats to a text that parses to the same System, and
// planning over it (a few placements) yields valid rings.
#include <algorithm>

#include "collectives/topology/plan.h"
#include "collectives/topology/topo_file.h"
#include "common/error.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;  // the reader's own limit is 4 MiB; keep inputs quick
  const std::string in(reinterpret_cast<const char*>(data), size);
  xccl::topo::System s;
  try {
    s = xccl::topo::parseSystem(in, "fuzz");
  } catch (const xccl::InvalidArgument&) {
    return 0;
  }
  const std::string text = xccl::topo::formatSystem(s);
  if (xccl::topo::formatSystem(xccl::topo::parseSystem(text, "formatted")) != text)
    __builtin_trap();
  if (s.devices.size() > 64) return 0;  // planning is exact up to 16 per host: keep it quick
  std::vector<xccl::topo::Place> places;
  for (size_t d = 0; d < s.devices.size(); ++d) {
    places.push_back({s.devices[d].host, static_cast<int>(d)});
  }
  for (size_t h = 0; h < s.hosts.size() && h < 8; ++h) places.push_back({static_cast<int>(h), -1});
  if (places.empty()) return 0;
  xccl::topo::Plan plan = xccl::topo::planRanks(s, places, 2);
  for (const auto& ring : plan.rings) {
    std::vector<int> sorted = ring;
    std::sort(sorted.begin(), sorted.end());
    for (size_t r = 0; r < sorted.size(); ++r) {
      if (sorted[r] != static_cast<int>(r)) __builtin_trap();  // not a permutation
    }
  }
  return 0;
}

std::vector<std::string> xcclFuzzSeeds() {
  return {
      "system cuda\nhost node0 numa 2\ndevices 4 numa 0\ndevices 4 numa 1\n"
      "nic mlx5_0 numa 0 gbps 100\nisland 0-3 XL 150\nisland 4,5,6,7 XL\nlink 3 4 PIX 24\n"
      "host node1 numa 2\ndevices 4 numa 0\ndevice numa 1\nnic eth0 gbps 25\n",
      "# comment only\n", "host a\ndevices 3\nlink 0 1 NODE 16\nlink 1 2 SYS\nhost b\ndevices 2\n"};
}
