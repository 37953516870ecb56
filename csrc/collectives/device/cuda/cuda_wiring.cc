// CudaDevice::wiring(): how this host's GPUs are connected, for topology detection.
//
// A pair with native peer atomics is taken as joined by NVLink (PCIe peers do not have
// them); otherwise the pair's PCI paths in sysfs say how far apart they are:
//   different root complexes: NODE on one NUMA node, SYS across;
//   one root complex, paths part right below it: PHB;
//   they part below one shared switch (upstream port in common): PIX; deeper trees: PXB.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_device.h"

namespace xccl {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

// The device's sysfs path split at '/' ("pci0000:00", "0000:00:01.0", ...), or {}.
std::vector<std::string> pciPath(const std::string& busId) {
  std::string link = "/sys/bus/pci/devices/" + lower(busId);
  char real[PATH_MAX];
  if (::realpath(link.c_str(), real) == nullptr) return {};
  std::vector<std::string> parts;
  std::string cur;
  for (const char* p = real;; ++p) {
    if (*p == '/' || *p == '\0') {
      if (!cur.empty() && (cur.rfind("pci", 0) == 0 || cur.find(':') != std::string::npos)) {
        parts.push_back(cur);
      }
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return parts;
}

int numaOf(const std::string& busId) {
  std::ifstream f("/sys/bus/pci/devices/" + lower(busId) + "/numa_node");
  int n = -1;
  f >> n;
  return n < 0 ? 0 : n;
}

std::string pciKind(const std::vector<std::string>& a, const std::vector<std::string>& b, int numaA,
                    int numaB) {
  if (a.empty() || b.empty() || a[0] != b[0]) return numaA == numaB ? "NODE" : "SYS";
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  // a[0] is the root complex, the devices are the last entries, and a PCIe switch shows as
  // an upstream and a downstream port: sharing all but those last two levels is one switch.
  if (common <= 1) return "PHB";
  return common + 2 >= std::min(a.size(), b.size()) ? "PIX" : "PXB";
}

}  // namespace

DeviceWiring CudaDevice::wiring() {
  DeviceWiring w;
  const int n = deviceCount();
  w.resize(n);
  std::vector<std::vector<std::string>> paths(n);
  for (int d = 0; d < n; ++d) {
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), d) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    paths[d] = pciPath(bus);
    w.numa[d] = numaOf(bus);
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      int atomics = 0;
      if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, a, b) !=
          cudaSuccess) {
        cudaGetLastError();
        atomics = 0;
      }
      w.kind[a][b] = atomics ? "XL" : pciKind(paths[a], paths[b], w.numa[a], w.numa[b]);
    }
  }
  return w;
}

}  // namespace xccl
