#include "interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cstring>

#include "common/error.h"

namespace xccl {
namespace net {
namespace {

bool startsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// Bridges and virtual links that containers and VMs bring: rarely the way to other hosts.
bool virtualBridge(const std::string& name) {
  for (const char* p : {"docker", "br-", "virbr", "veth", "cni", "flannel", "lxc", "vnet"}) {
    if (startsWith(name, p)) return true;
  }
  return false;
}

std::string describe(const std::vector<Interface>& ifaces) {
  if (ifaces.empty()) return "none";
  std::string s;
  for (const auto& i : ifaces) s += strCat(s.empty() ? "" : ", ", i.name, " ", i.addr.host());
  return s;
}

}  // namespace

SockAddr::SockAddr(const sockaddr* sa) {
  XCCL_CHECK_ARG(sa != nullptr && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6),
                 "not an IPv4 or IPv6 socket address");
  std::memcpy(&ss, sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
}

void SockAddr::setPort(uint16_t port) {
  if (family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  }
}

std::string SockAddr::host() const {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
  } else if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  }
  return buf;
}

int familyOf(const std::string& name) {
  if (name == "AF_INET") return AF_INET;
  if (name == "AF_INET6") return AF_INET6;
  throw InvalidArgument(strCat("XCCL_SOCKET_FAMILY='", name, "' (AF_INET or AF_INET6)"));
}

const char* familyName(int family) { return family == AF_INET6 ? "IPv6" : "IPv4"; }

IfSpec parseIfSpec(const std::string& text) {
  IfSpec spec;
  size_t pos = 0;
  if (pos < text.size() && text[pos] == '^') {
    spec.exclude = true;
    ++pos;
  }
  if (pos < text.size() && text[pos] == '=') {
    spec.exact = true;
    ++pos;
  }
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string name = text.substr(pos, comma - pos);
    if (!name.empty()) spec.names.push_back(name);
    pos = comma + 1;
  }
  return spec;
}

bool ifMatches(const IfSpec& spec, const std::string& name) {
  bool hit = false;
  for (const auto& n : spec.names) {
    if (spec.exact ? name == n : startsWith(name, n.c_str())) hit = true;
  }
  return spec.exclude ? !hit : hit;
}

const Interface* chooseInterface(const std::vector<Interface>& ifaces, const std::string& text,
                                 std::string* how, std::string* why) {
  const IfSpec spec = parseIfSpec(text);
  if (!spec.empty()) {
    for (const auto& i : ifaces) {
      // An exclusion list never picks loopback unless it is all there is (below).
      if (ifMatches(spec, i.name) && !(spec.exclude && i.loopback)) {
        *how = strCat("XCCL_SOCKET_IFNAME=", text);
        return &i;
      }
    }
    if (spec.exclude) {
      for (const auto& i : ifaces) {
        if (ifMatches(spec, i.name)) {
          *how = strCat("XCCL_SOCKET_IFNAME=", text, " (only loopback is left)");
          return &i;
        }
      }
    }
    const std::string fam =
        ifaces.empty() ? std::string() : strCat(familyName(ifaces.front().addr.family()), " ");
    *why = strCat("XCCL_SOCKET_IFNAME=", text, ": no up ", fam, "interface ",
                  spec.exclude ? "is left after excluding " : "matches ",
                  spec.exact ? "the names" : "the prefixes", " given (up ", fam,
                  "interfaces: ", describe(ifaces), ")");
    return nullptr;
  }
  for (const auto& i : ifaces) {
    if (!i.loopback && !virtualBridge(i.name)) {
      *how = "auto: first non-loopback, non-bridge interface";
      return &i;
    }
  }
  for (const auto& i : ifaces) {
    if (!i.loopback) {
      *how = "auto: only container/VM bridges besides loopback";
      return &i;
    }
  }
  for (const auto& i : ifaces) {
    *how = "auto: loopback only (one machine)";
    return &i;
  }
  *why = "no up interface with an address of that family at all";
  return nullptr;
}

std::vector<Interface> listInterfaces(int family) {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != family) continue;
    if (!(ifa->ifa_flags & IFF_UP)) continue;
    if (family == AF_INET6) {
      const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&a) || IN6_IS_ADDR_V4MAPPED(&a)) continue;
    }
    Interface i;
    i.name = ifa->ifa_name ? ifa->ifa_name : "";
    i.addr = SockAddr(ifa->ifa_addr);
    i.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(i);
  }
  freeifaddrs(list);
  return out;
}

}  // namespace net
}  // namespace xccl
