#include "topology.h"

#include <algorithm>
#include <map>

#include "common/error.h"
#include "topo_file.h"

namespace xccl {

std::vector<int> hostIndexOf(const std::vector<std::string>& hostIds) {
  std::map<std::string, int> index;
  std::vector<int> out;
  for (const std::string& id : hostIds) {
    auto it = index.emplace(id, static_cast<int>(index.size())).first;
    out.push_back(it->second);
  }
  return out;
}

namespace {

// Appends host 0 of `one` (devices, NICs, links) to `sys`; returns its index.
int appendHost(topo::System& sys, const topo::System& one) {
  XCCL_CHECK_ARG(one.hosts.size() == 1, "a host's description holds ", one.hosts.size(), " hosts");
  const topo::Host& h = one.hosts[0];
  const int host = sys.addHost(h.name, h.numaNodes);
  const int base = static_cast<int>(sys.devices.size());
  for (int d : h.devices) sys.addDevice(host, one.devices[d].numa);
  for (int n : h.nics) sys.addNic(host, one.nics[n].name, one.nics[n].numa, one.nics[n].gbps);
  for (const topo::Link& l : one.links) sys.addLink(base + l.a, base + l.b, l.kind, l.gbs);
  return host;
}

}  // namespace

CommTopology buildCommTopology(const std::vector<std::string>& hostIds,
                               const std::vector<int>& deviceOrdinals,
                               const std::vector<std::string>& hostTexts,
                               const std::string& topoFile) {
  CommTopology t;
  const std::vector<int> hostOf = hostIndexOf(hostIds);
  const int nhosts = hostOf.empty() ? 0 : *std::max_element(hostOf.begin(), hostOf.end()) + 1;
  bool detected = static_cast<int>(hostTexts.size()) == nhosts;
  for (const std::string& s : hostTexts) detected = detected && !s.empty();
  if (!topoFile.empty()) {
    t.system = topo::loadSystemFile(topoFile);
    t.source = "XCCL_TOPO_FILE=" + topoFile;
    XCCL_CHECK_ARG(static_cast<int>(t.system.hosts.size()) >= nhosts, "XCCL_TOPO_FILE=", topoFile,
                   " describes ", t.system.hosts.size(), " host(s), the communicator has ", nhosts);
  } else if (detected) {
    t.system = topo::System();
    for (int h = 0; h < nhosts; ++h) {
      topo::System one =
          topo::parseSystem(hostTexts[h], "host " + std::to_string(h) + "'s topology");
      t.system.deviceType = one.deviceType;
      appendHost(t.system, one);
    }
    t.source = "detected";
  } else {
    t.system = topo::systemOfHosts(nhosts);
    t.source = "host identities";
  }
  for (size_t r = 0; r < hostIds.size(); ++r) {
    topo::Place p{hostOf[r], -1};
    const int ordinal = r < deviceOrdinals.size() ? deviceOrdinals[r] : -1;
    if (ordinal >= 0 && !t.system.devices.empty()) {
      p.device = t.system.deviceAt(p.host, ordinal);
      XCCL_CHECK_ARG(p.device >= 0 || t.source != "XCCL_TOPO_FILE=" + topoFile, t.source, ": host ",
                     t.system.hosts[p.host].name, " has ", t.system.hosts[p.host].devices.size(),
                     " device(s), rank ", r, " runs on device ", ordinal);
    }
    t.places.push_back(p);
  }
  t.plan = topo::planRanks(t.system, t.places);
  return t;
}

}  // namespace xccl
