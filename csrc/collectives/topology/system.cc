#include "system.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "common/error.h"

namespace xccl {
namespace topo {

namespace {
struct KindInfo {
  LinkKind kind;
  const char* name;
  double gbs;  // a typical figure of the class, used when a file or the runtime says no more
};
const KindInfo kKinds[] = {
    {LinkKind::kSelf, "X", 0},   {LinkKind::kXl, "XL", 100},    {LinkKind::kPix, "PIX", 24},
    {LinkKind::kPxb, "PXB", 22}, {LinkKind::kPhb, "PHB", 20},   {LinkKind::kNode, "NODE", 16},
    {LinkKind::kSys, "SYS", 10}, {LinkKind::kNet, "NET", 12.5},
};
}  // namespace

const char* linkKindName(LinkKind k) {
  for (const KindInfo& i : kKinds) {
    if (i.kind == k) return i.name;
  }
  return "?";
}

bool parseLinkKind(const std::string& name, LinkKind* out) {
  std::string up;
  for (char c : name) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const KindInfo& i : kKinds) {
    if (up == i.name) {
      *out = i.kind;
      return true;
    }
  }
  return false;
}

double defaultLinkGBs(LinkKind k) {
  for (const KindInfo& i : kKinds) {
    if (i.kind == k) return i.gbs;
  }
  return 0;
}

int System::addHost(const std::string& name, int numaNodes) {
  hosts.push_back(Host{name, std::max(1, numaNodes), {}, {}});
  return static_cast<int>(hosts.size()) - 1;
}

int System::addDevice(int host, int numa) {
  XCCL_CHECK_ARG(host >= 0 && host < static_cast<int>(hosts.size()), "topology: no host ", host);
  Device d;
  d.host = host;
  d.local = static_cast<int>(hosts[host].devices.size());
  d.numa = numa;
  devices.push_back(d);
  hosts[host].devices.push_back(static_cast<int>(devices.size()) - 1);
  return static_cast<int>(devices.size()) - 1;
}

void System::addNic(int host, const std::string& name, int numa, double gbps) {
  XCCL_CHECK_ARG(host >= 0 && host < static_cast<int>(hosts.size()), "topology: no host ", host);
  nics.push_back(Nic{host, name, numa, gbps});
  hosts[host].nics.push_back(static_cast<int>(nics.size()) - 1);
}

void System::addLink(int a, int b, LinkKind kind, double gbs) {
  const int n = static_cast<int>(devices.size());
  XCCL_CHECK_ARG(a >= 0 && a < n && b >= 0 && b < n && a != b, "topology: bad link ", a, "-", b);
  XCCL_CHECK_ARG(devices[a].host == devices[b].host,
                 "topology: a link joins devices of one host "
                 "(hosts differ: use NICs between hosts)");
  XCCL_CHECK_ARG(gbs > 0, "topology: link ", a, "-", b, " needs a positive bandwidth");
  for (Link& l : links) {
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) {
      l = Link{a, b, kind, gbs};
      return;
    }
  }
  links.push_back(Link{a, b, kind, gbs});
}

int System::deviceAt(int host, int local) const {
  if (host < 0 || host >= static_cast<int>(hosts.size())) return -1;
  const auto& d = hosts[host].devices;
  return local >= 0 && local < static_cast<int>(d.size()) ? d[local] : -1;
}

double System::hostNetGBs(int host) const {
  double sum = 0;
  for (int i : hosts[host].nics) sum += nics[i].gbps / 8.0;
  return sum;
}

double System::netGBs(int hostA, int hostB) const {
  if (hostA == hostB) return std::numeric_limits<double>::infinity();
  double a = hostNetGBs(hostA), b = hostNetGBs(hostB);
  // A host that lists no NIC is taken at the NET default: unknown, not zero.
  if (a <= 0) a = defaultLinkGBs(LinkKind::kNet);
  if (b <= 0) b = defaultLinkGBs(LinkKind::kNet);
  return std::min(a, b);
}

Path System::path(int a, int b) const {
  if (a == b) return Path{LinkKind::kSelf, std::numeric_limits<double>::infinity()};
  const Device &da = devices[a], &db = devices[b];
  if (da.host != db.host) return Path{LinkKind::kNet, netGBs(da.host, db.host)};
  for (const Link& l : links) {
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return Path{l.kind, l.gbs};
  }
  LinkKind k = da.numa == db.numa ? LinkKind::kPhb : LinkKind::kSys;
  return Path{k, defaultLinkGBs(k)};
}

void System::validate() const {
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& d = devices[i];
    XCCL_CHECK_ARG(d.host >= 0 && d.host < static_cast<int>(hosts.size()), "topology: device ", i,
                   " on host ", d.host, " which does not exist");
    XCCL_CHECK_ARG(d.numa >= 0 && d.numa < hosts[d.host].numaNodes, "topology: host ",
                   hosts[d.host].name, " device ", d.local, " on NUMA node ", d.numa, " of ",
                   hosts[d.host].numaNodes);
  }
  for (const Nic& n : nics) {
    XCCL_CHECK_ARG(n.numa >= 0 && n.numa < hosts[n.host].numaNodes, "topology: host ",
                   hosts[n.host].name, " NIC ", n.name, " on NUMA node ", n.numa, " of ",
                   hosts[n.host].numaNodes);
    XCCL_CHECK_ARG(n.gbps > 0, "topology: NIC ", n.name, " needs a positive speed");
  }
  for (size_t i = 0; i < hosts.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      XCCL_CHECK_ARG(hosts[i].name != hosts[j].name, "topology: two hosts named ", hosts[i].name);
    }
  }
}

}  // namespace topo
}  // namespace xccl
