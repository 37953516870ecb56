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
// this one's (up, of one address family, in the kernel's order).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace xccl {
namespace net {

// An IPv4 or an IPv6 address with a port.
struct SockAddr {
  sockaddr_storage ss{};
  SockAddr() = default;
  explicit SockAddr(const sockaddr* sa);  // AF_INET or AF_INET6; throws on another family
  int family() const { return ss.ss_family; }
  socklen_t len() const {
    return family() == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  }
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&ss); }
  sockaddr* sa() { return reinterpret_cast<sockaddr*>(&ss); }
  uint16_t port() const;  // host order
  void setPort(uint16_t port);
  std::string host() const;  // "10.0.0.1" or "fd00::1"
};

// AF_INET or AF_INET6 from "AF_INET" / "AF_INET6" (XCCL_SOCKET_FAMILY); throws otherwise.
int familyOf(const std::string& name);
const char* familyName(int family);  // "IPv4" / "IPv6"

struct Interface {
  std::string name;
  SockAddr addr;
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

// The up interfaces with an address of `family` (IPv6: global and unique-local addresses;
// link-local ones need a scope the other hosts cannot know).
std::vector<Interface> listInterfaces(int family = AF_INET);

}  // namespace net
}  // namespace xccl
