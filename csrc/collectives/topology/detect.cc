#include "detect.h"

#include <dirent.h>
#include <unistd.h>

#include <cctype>
#include <fstream>

#include "collectives/device/device.h"
#include "collectives/transport/tcp/socket.h"
#include "common/error.h"

namespace xccl {
namespace topo {

namespace {

int numaNodeCount() {
  int count = 0;
  if (DIR* d = ::opendir("/sys/devices/system/node")) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 4 && n.compare(0, 4, "node") == 0 &&
          std::isdigit(static_cast<unsigned char>(n[4]))) {
        ++count;
      }
    }
    ::closedir(d);
  }
  return count > 0 ? count : 1;
}

long readLong(const std::string& path, long fallback) {
  std::ifstream f(path);
  long v = fallback;
  if (!(f >> v)) return fallback;
  return v;
}

}  // namespace

System detectHost(const std::string& deviceKind) {
  System sys;
  sys.deviceType = deviceKind.empty() ? "host" : deviceKind;
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  std::string hostname = name[0] ? name : "localhost";
  for (char& c : hostname) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '#') c = '_';
  }
  const int numa = numaNodeCount();
  const int host = sys.addHost(hostname, numa);
  auto clampNuma = [numa](long n) { return n >= 0 && n < numa ? static_cast<int>(n) : 0; };

  DeviceWiring w = deviceWiring(sys.deviceType);
  for (int d = 0; d < w.count; ++d) sys.addDevice(host, clampNuma(w.numa[d]));
  for (int a = 0; a < w.count; ++a) {
    for (int b = a + 1; b < w.count; ++b) {
      LinkKind kind;
      if (w.kind[a][b].empty() || !parseLinkKind(w.kind[a][b], &kind)) continue;
      // A pair on the default fabric (PHB one node, SYS across) needs no explicit link.
      const LinkKind fabric = w.numa[a] == w.numa[b] ? LinkKind::kPhb : LinkKind::kSys;
      if (kind == fabric && w.gbs[a][b] <= 0) continue;
      sys.addLink(a, b, kind, w.gbs[a][b] > 0 ? w.gbs[a][b] : defaultLinkGBs(kind));
    }
  }

  std::string how, why;
  net::Interface nic;
  if (net::chosenInterface(&nic, &how, &why)) {
    const std::string base = "/sys/class/net/" + nic.name;
    long mbps = readLong(base + "/speed", -1);
    double gbps = mbps > 0 ? static_cast<double>(mbps) / 1000.0 : 10.0;
    sys.addNic(host, nic.name, clampNuma(readLong(base + "/device/numa_node", 0)), gbps);
  }
  return sys;
}

}  // namespace topo
}  // namespace xccl
