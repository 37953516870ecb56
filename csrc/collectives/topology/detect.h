// Detection of this host: NUMA nodes (sysfs), the devices of the communicator's kind and
// their links (device.h's deviceWiring: xdev simulated, CUDA from the runtime and the PCI
// tree), and the NIC the TCP transport uses (the interface XCCL_SOCKET_IFNAME selects, with
// its sysfs speed and NUMA node). The result describes one host; a communicator's hosts
// exchange theirs as topology-file text (topology.h).
#pragma once

#include <string>

#include "system.h"

namespace xccl {
namespace topo {

// Never throws for a machine that lacks a piece: a missing sysfs file means one NUMA node,
// an unknown NIC speed is taken as 10 Gbit/s (veth and most virtual NICs), no devices for
// the host kind.
System detectHost(const std::string& deviceKind);

}  // namespace topo
}  // namespace xccl
