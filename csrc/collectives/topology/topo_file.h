// Topology files (XCCL_TOPO_FILE, `xccl-topo --dump`): a whole system in a text a person can
// read and write, used to simulate systems we do not have and to override detection.
//
//   # '#' starts a comment; words are separated by blanks; one statement per line
//   system cuda                    # the device kind (host, xdev, cuda); default host
//   host node0 numa 2              # a host (its name) and its NUMA node count (default 1)
//   devices 4 numa 0               # 4 devices on NUMA node 0: ordinals 0-3
//   devices 4 numa 1               # ordinals 4-7 (ordinals count up per host)
//   device numa 1                  # one more device (ordinal 8)
//   nic eth0 numa 0 gbps 100       # a NIC, its NUMA node and speed in Gbit/s
//   island 0-3 XL 150              # every pair of devices 0..3: a direct link, 150 GB/s
//   island 4,5,6,7 XL              # bandwidth left out: the kind's typical figure
//   link 3 4 PIX 24                # one pair (device ordinals on this host)
//   host node1 numa 2              # the next host; statements below belong to it
//
// Pairs without a link line are joined by the host's PCIe/CPU fabric: PHB on one NUMA node,
// SYS across; hosts by their NICs. Kinds: XL PIX PXB PHB NODE SYS (system.h).
#pragma once

#include <string>

#include "system.h"

namespace xccl {
namespace topo {

// Parses a topology text; `origin` names it in errors ("topology file F line 7: ...").
// Throws InvalidArgument on anything it cannot read; never reads past the text.
System parseSystem(const std::string& text, const std::string& origin);
// Reads and parses a file (InvalidArgument if it cannot be read).
System loadSystemFile(const std::string& path);
// The text parseSystem() reads back to an equal System.
std::string formatSystem(const System& sys);

}  // namespace topo
}  // namespace xccl
