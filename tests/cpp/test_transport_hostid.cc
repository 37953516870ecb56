// Host identity and interface selection (the parts of "which peers are on my host, and which
// address do I give them" that need no second machine).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/transport/tcp/interfaces.h"
#include "collectives/transport/tcp/socket.h"
#include "common/error.h"
#include "test_util.h"

namespace {

using xccl::net::chooseInterface;
using xccl::net::Interface;

Interface iface(const char* name, const char* ip, bool loopback = false) {
  Interface i;
  i.name = name;
  i.addr = xccl::net::parseAddr(xccl::strCat(ip, ":0"));
  i.loopback = loopback;
  return i;
}

std::string pick(const std::vector<Interface>& ifs, const std::string& spec) {
  std::string how, why;
  const Interface* i = chooseInterface(ifs, spec, &how, &why);
  return i ? i->name : "none: " + why;
}

TEST(Interfaces, NcclSyntax) {
  std::vector<Interface> ifs = {iface("lo", "127.0.0.1", true), iface("docker0", "172.17.0.1"),
                                iface("eth0", "10.0.0.5"), iface("eth1", "10.1.0.5"),
                                iface("ib0", "192.168.5.5")};
  EXPECT_EQ(pick(ifs, ""), "eth0");  // auto skips loopback and bridges
  EXPECT_EQ(pick(ifs, "eth"), "eth0");
  EXPECT_EQ(pick(ifs, "ib,eth1"), "eth1");  // list order of the machine, first match
  EXPECT_EQ(pick(ifs, "ib"), "ib0");
  EXPECT_EQ(pick(ifs, "^docker,lo,eth"), "ib0");
  EXPECT_EQ(pick(ifs, "=eth1"), "eth1");
  EXPECT_EQ(pick(ifs, "=eth"),
            "none: XCCL_SOCKET_IFNAME==eth: no up IPv4 interface matches the "
            "names given (up IPv4 interfaces: lo 127.0.0.1, docker0 "
            "172.17.0.1, eth0 10.0.0.5, eth1 10.1.0.5, ib0 192.168.5.5)");
  EXPECT_EQ(pick(ifs, "^=eth0"), "docker0");
  EXPECT_EQ(pick(ifs, "lo"), "lo");  // named: loopback is allowed
}

TEST(Interfaces, FallbacksWhenTheMachineHasLittle) {
  std::vector<Interface> bridged = {iface("lo", "127.0.0.1", true), iface("docker0", "172.17.0.1")};
  EXPECT_EQ(pick(bridged, ""), "docker0");
  std::vector<Interface> alone = {iface("lo", "127.0.0.1", true)};
  EXPECT_EQ(pick(alone, ""), "lo");
  EXPECT_EQ(pick(alone, "^docker"), "lo");  // exclusions leave loopback as the last resort
  EXPECT_EQ(pick({}, "").substr(0, 6), "none: ");
}

TEST(Interfaces, ThisMachineAndClearErrors) {
  {
    xccl_test::ScopedEnv env("XCCL_SOCKET_IFNAME", "lo");
    EXPECT_EQ(xccl::net::formatAddr(xccl::net::localAddress()), "127.0.0.1:0");
  }
  {
    xccl_test::ScopedEnv env("XCCL_SOCKET_IFNAME", "=no-such-if0");
    try {
      xccl::net::localAddress();
      ADD_FAILURE() << "no error for a missing interface";
    } catch (const xccl::InvalidUsage& e) {
      EXPECT_NE(std::string(e.what()).find("up IPv4 interfaces: "), std::string::npos) << e.what();
    }
  }
  {
    xccl_test::ScopedEnv bad("XCCL_SOCKET_FAMILY", "AF_UNIX");
    EXPECT_THROW(xccl::net::localAddress(), xccl::InvalidArgument);
  }
  // IPv6: the loopback's ::1 where the kernel has IPv6 (link-local addresses never count).
  xccl_test::ScopedEnv v6("XCCL_SOCKET_FAMILY", "AF_INET6");
  xccl_test::ScopedEnv lo("XCCL_SOCKET_IFNAME", "lo");
  bool loHasV6 = false;
  for (const auto& i : xccl::net::listInterfaces(AF_INET6)) {
    EXPECT_EQ(i.addr.family(), AF_INET6);
    EXPECT_NE(i.addr.host().rfind("fe80", 0), 0u) << i.addr.host();
    loHasV6 = loHasV6 || (i.name == "lo" && i.addr.host() == "::1");
  }
  if (loHasV6) EXPECT_EQ(xccl::net::formatAddr(xccl::net::localAddress()), "[::1]:0");
}

TEST(Interfaces, AddressesParseFormatAndPackBothFamilies) {
  using xccl::net::SockAddr;
  for (const char* text : {"10.1.2.3:4000", "[fd00::1]:4000", "[::1]:0", "127.0.0.1:65535"}) {
    SockAddr a = xccl::net::parseAddr(text);
    EXPECT_EQ(xccl::net::formatAddr(a), text);
    unsigned char id[128] = {0};
    xccl::net::putIdAddr(a, id + 8, id + 48);
    EXPECT_EQ(xccl::net::formatAddr(xccl::net::getIdAddr(id + 8, id + 48)), text);
    EXPECT_EQ(id[14], a.family() == AF_INET6 ? 6 : 0) << "IPv4 keeps the layout ids always had";
  }
  for (const char* bad : {"fd00::1:4000", "[fd00::1]", "[10.0.0.1]:80", "1.2.3.4:70000", "x:1"}) {
    EXPECT_THROW(xccl::net::parseAddr(bad), xccl::InvalidArgument) << bad;
  }
  unsigned char damaged[128] = {0};
  damaged[14] = 9;
  EXPECT_THROW(xccl::net::getIdAddr(damaged + 8, damaged + 48), xccl::InvalidArgument);
}

TEST(HostId, NamesTheNetworkAndPidNamespaces) {
  std::string id = xccl::localHostId();
  EXPECT_NE(id.find(xccl::namespaceId("net")), std::string::npos) << id;
  EXPECT_NE(id.find(xccl::namespaceId("pid")), std::string::npos) << id;
  EXPECT_EQ(xccl::namespaceId("net").substr(0, 5), "net:[");
  xccl_test::ScopedEnv node("XCCL_NODE_ID", "node-a");
  EXPECT_EQ(xccl::localHostId(), "node-a");  // the override stays, for tests
}

// A process in a new network namespace is another host: its identity differs, with no
// XCCL_NODE_ID. Needs root (CLONE_NEWNET); skipped otherwise.
TEST(HostId, AnotherNetworkNamespaceIsAnotherHost) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    std::string id = unshare(CLONE_NEWNET) == 0 ? xccl::localHostId() : std::string("EPERM");
    ssize_t n = write(fds[1], id.data(), id.size());
    _exit(n == static_cast<ssize_t>(id.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string theirs;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) theirs.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (theirs == "EPERM") GTEST_SKIP() << "unshare(CLONE_NEWNET) needs root";
  EXPECT_FALSE(theirs.empty());
  EXPECT_NE(theirs, xccl::localHostId());
}

}  // namespace
