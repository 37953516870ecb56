// The topology model: a whole system as pure data (hosts, NUMA nodes, devices, NICs and the
// links between them), plus the pure functions that answer "how are these two devices
// connected, and how fast". Detection (detect.h) and topology files (topo_file.h) produce it;
// the planner (plan.h) and xccl-topo read it.
//
// Link kinds, closest first (the words of `nvidia-smi topo -m`; XL is a direct device-to-device
// link such as NVLink or MLU-Link):
//
//   X     the device itself
//   XL    direct device link(s)
//   PIX   at most one PCIe switch between the two
//   PXB   several PCIe switches, no host bridge
//   PHB   through a PCIe host bridge (same CPU)
//   NODE  between host bridges of one NUMA node
//   SYS   across NUMA nodes (the CPU interconnect)
//   NET   another host, through NICs
#pragma once

#include <string>
#include <vector>

namespace xccl {
namespace topo {

enum class LinkKind { kSelf, kXl, kPix, kPxb, kPhb, kNode, kSys, kNet };
const char* linkKindName(LinkKind k);  // "X", "XL", "PIX", ...
// The kind for a name (case-insensitive); false if it is not one.
bool parseLinkKind(const std::string& name, LinkKind* out);
// What a link of this kind moves when nothing more is known, GB/s (one direction).
double defaultLinkGBs(LinkKind k);

struct Device {
  int host = 0;   // index into System::hosts
  int local = 0;  // ordinal on its host (what a process passes to set_device)
  int numa = 0;
};

struct Nic {
  int host = 0;
  std::string name;
  int numa = 0;
  double gbps = 0;  // Gbit/s, one direction
};

// An explicit link between two devices of one host (global device indices).
struct Link {
  int a = 0, b = 0;
  LinkKind kind = LinkKind::kPhb;
  double gbs = 0;  // GB/s, one direction
};

struct Host {
  std::string name;
  int numaNodes = 1;
  std::vector<int> devices;  // global device indices, by local ordinal
  std::vector<int> nics;     // indices into System::nics
};

struct Path {
  LinkKind kind = LinkKind::kSys;
  double gbs = 0;
};

struct System {
  std::string deviceType = "host";  // the kind of device the system describes
  std::vector<Host> hosts;
  std::vector<Device> devices;
  std::vector<Nic> nics;
  std::vector<Link> links;

  // Adds a host / device / NIC / link and keeps the indices consistent.
  int addHost(const std::string& name, int numaNodes);
  int addDevice(int host, int numa);  // local ordinal = how many the host has so far
  void addNic(int host, const std::string& name, int numa, double gbps);
  void addLink(int a, int b, LinkKind kind, double gbs);  // replaces an earlier a-b link

  // Global index of device `local` on `host`, or -1.
  int deviceAt(int host, int local) const;
  // How devices a and b (global) are connected: an explicit link if there is one, else the
  // host's PCIe/CPU fabric by NUMA node (PHB on one node, SYS across), else NET at the
  // slower of the two hosts' network bandwidths.
  Path path(int a, int b) const;
  // The host's network bandwidth in GB/s: the sum of its NICs (0 when it lists none).
  double hostNetGBs(int host) const;
  // Between two hosts: the slower side's network bandwidth, GB/s (NET to itself: infinite).
  double netGBs(int hostA, int hostB) const;
  // Throws InvalidArgument naming the first inconsistency (a link between hosts, a device
  // with a NUMA node its host lacks, ...).
  void validate() const;
};

}  // namespace topo
}  // namespace xccl
