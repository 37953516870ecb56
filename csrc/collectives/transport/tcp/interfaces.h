// Which network interface a rank advertises: the syntax NCCL_SOCKET_IFNAME users know.
//
//   XCCL_SOCKET_IFNAME=eth0,ib     interfaces whose name starts with eth0 or ib
//   XCCL_SOCKET_IFNAME=^docker,lo  any interface but those starting with docker or lo
//   XCCL_SOCKET_IFNAME==eth0       exactly eth0 (a leading '=' means exact names; '^=' too)
//   unset                          the first up interface that is not loopback and not a
//                                  container/VM bridge (docker*, br-*, virbr*, veth*, cni*,
//                                  flannel*, lxc*); else the first that is not loopback;
//                                  else loopback (one machine)
//
// Pure functions over a list, so tests can describe any machine; listInterfaces() reads
// this one's (up, IPv4, in the kernel's order).
#pragma once

#include <netinet/in.h>

#include <string>
#include <vector>

namespace xccl {
namespace net {

struct Interface {
  std::string name;
  sockaddr_in addr{};
  bool loopback = false;
};

struct IfSpec {
  bool exclude = false;  // '^': everything but the names
  bool exact = false;    // '=': whole names, not prefixes
  std::vector<std::string> names;
  bool empty() const { return names.empty(); }
};

IfSpec parseIfSpec(const std::string& text);
bool ifMatches(const IfSpec& spec, const std::string& name);

// The interface to use, or nullptr (then *why says what was looked for and what exists).
// `how` receives a few words on why this one ("XCCL_SOCKET_IFNAME=eth", "auto: first
// non-loopback, non-bridge interface").
const Interface* chooseInterface(const std::vector<Interface>& ifaces, const std::string& spec,
                                 std::string* how, std::string* why);

std::vector<Interface> listInterfaces();

}  // namespace net
}  // namespace xccl
