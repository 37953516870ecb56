#include "topology.h"

#include <map>
#include <sstream>

namespace xccl {

Topology buildTopology(const std::vector<std::string>& hostIds) {
  Topology t;
  const int n = static_cast<int>(hostIds.size());
  std::map<std::string, int> index;
  t.hostOf.resize(n);
  for (int r = 0; r < n; ++r) {
    auto it = index.find(hostIds[r]);
    if (it == index.end()) {
      it = index.emplace(hostIds[r], static_cast<int>(t.hosts.size())).first;
      t.hosts.emplace_back();
    }
    t.hostOf[r] = it->second;
    t.hosts[it->second].push_back(r);
  }
  for (const auto& ranks : t.hosts) t.ring.insert(t.ring.end(), ranks.begin(), ranks.end());
  for (int i = 0; i < n && n > 1; ++i) {
    if (t.hostOf[t.ring[i]] != t.hostOf[t.ring[(i + 1) % n]]) ++t.networkHops;
  }
  return t;
}

std::string describeTopology(const Topology& topo, const std::vector<std::string>& hostnames,
                             const std::vector<std::vector<std::string>>& transport) {
  std::ostringstream os;
  const int n = static_cast<int>(topo.hostOf.size());
  os << "      ";
  for (int p = 0; p < n; ++p) os << " r" << p << (p < 10 ? "  " : " ");
  os << " host\n";
  for (int r = 0; r < n; ++r) {
    os << "r" << r << (r < 10 ? "    " : "   ");
    for (int p = 0; p < n; ++p) {
      std::string cell = r == p ? "X" : transport[r][p];
      cell.resize(4, ' ');
      os << " " << cell;
    }
    os << " " << (r < static_cast<int>(hostnames.size()) ? hostnames[r] : "?") << " (host "
       << topo.hostOf[r] << ")\n";
  }
  os << "ring:";
  for (int r : topo.ring) os << " " << r;
  os << "  (" << topo.hosts.size() << " host(s), " << topo.networkHops << " network hop(s))\n";
  return os.str();
}

}  // namespace xccl
