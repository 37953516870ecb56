// Topology: the model, topology files, the rendering and the communicator's view
// (pure functions; planning over many described systems is in test_topology_plan.cc).
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <set>

#include "collectives/topology/detect.h"
#include "collectives/topology/render.h"
#include "collectives/topology/topo_file.h"
#include "collectives/topology/topology.h"
#include "common/error.h"

namespace {

using namespace xccl::topo;

const char* kDgxLike = R"(# two hosts of 8 devices in two islands
system cuda
host node0 numa 2
devices 4 numa 0
devices 4 numa 1
nic eth0 numa 0 gbps 100
nic eth1 numa 1 gbps 100
island 0-3 XL 150
island 4-7 XL 150
link 3 4 PIX 24
host node1 numa 2
devices 4 numa 0
devices 4 numa 1
nic eth0 numa 0 gbps 50
island 0-3 XL 150
island 4-7 XL 150
)";

TEST(TopoFile, ParsesHostsDevicesNicsAndLinks) {
  System s = parseSystem(kDgxLike, "test");
  ASSERT_EQ(s.hosts.size(), 2u);
  EXPECT_EQ(s.deviceType, "cuda");
  EXPECT_EQ(s.devices.size(), 16u);
  EXPECT_EQ(s.hosts[0].nics.size(), 2u);
  EXPECT_EQ(s.path(0, 1).kind, LinkKind::kXl);
  EXPECT_DOUBLE_EQ(s.path(0, 1).gbs, 150);
  EXPECT_EQ(s.path(3, 4).kind, LinkKind::kPix);
  EXPECT_EQ(s.path(0, 5).kind, LinkKind::kSys);  // no link line, NUMA 0 vs 1
  EXPECT_EQ(s.path(8, 9).kind, LinkKind::kXl);   // host 1's devices 0 and 1
  EXPECT_EQ(s.path(0, 8).kind, LinkKind::kNet);
  EXPECT_DOUBLE_EQ(s.path(0, 8).gbs, 50.0 / 8);  // the slower host: one 50 Gbit/s NIC
  EXPECT_DOUBLE_EQ(s.hostNetGBs(0), 25.0);
}

TEST(TopoFile, FormatReadsBackEqual) {
  System a = parseSystem(kDgxLike, "test");
  System b = parseSystem(formatSystem(a), "formatted");
  EXPECT_EQ(formatSystem(a), formatSystem(b));
  ASSERT_EQ(a.devices.size(), b.devices.size());
  for (size_t i = 0; i < a.devices.size(); ++i) {
    for (size_t j = 0; j < a.devices.size(); ++j) {
      EXPECT_EQ(a.path(i, j).kind, b.path(i, j).kind);
      EXPECT_DOUBLE_EQ(a.path(i, j).gbs, b.path(i, j).gbs);
    }
  }
}

TEST(TopoFile, ErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"devices 4\n", "line 1: 'devices' before any 'host' line"},
      {"host a\ndevices 2\nlink 0 5 XL\n", "line 3: '5' is not a whole number in 0..1"},
      {"host a\ndevices 2\nlink 0 1 FAST\n", "line 3: unknown link kind 'FAST'"},
      {"host a numa 2\ndevice numa 2\n", "line 2: '2' is not a whole number in 0..1"},
      {"host a\nnic eth0\n", "line 2: nic eth0 needs 'gbps <speed>'"},
      {"host a\nwhatever\n", "line 2: unknown statement 'whatever'"},
      {"host a\ndevices 2\nisland 0 XL\n", "line 3: an island needs two devices or more"},
      {"host a\ndevices 2\nlink 0 1 XL -3\n", "line 3: '-3' is not a bandwidth"},
      {"host a\nhost a\n", "two hosts named a"},
      {"host a\ndevices 99999\n", "line 2: '99999' is not a whole number in 1..1024"},
  };
  for (const Case& c : cases) {
    try {
      parseSystem(c.text, "F");
      ADD_FAILURE() << "no error for: " << c.text;
    } catch (const xccl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos)
          << "got: " << e.what() << "\nwant: " << c.want;
    }
  }
}

TEST(TopoFile, MissingFileIsAClearError) {
  EXPECT_THROW(loadSystemFile("/nonexistent/topo.txt"), xccl::InvalidArgument);
}

TEST(Detect, ThisHostFormatsAndParsesBack) {
  System s = detectHost("host");
  ASSERT_EQ(s.hosts.size(), 1u);
  EXPECT_TRUE(s.devices.empty());
  EXPECT_GE(s.hosts[0].numaNodes, 1);
  System back = parseSystem(formatSystem(s), "detected");
  EXPECT_EQ(formatSystem(back), formatSystem(s));
  System x = detectHost("xdev");  // simulated wiring: islands of 4 joined by XL
  if (x.devices.size() >= 5) {
    EXPECT_EQ(x.path(0, 1).kind, LinkKind::kXl);
    EXPECT_EQ(x.path(3, 4).kind, LinkKind::kPhb);
  }
}

TEST(CommTopology, HostIdentitiesGroupHostsAndMinimiseNetworkHops) {
  auto t = xccl::buildCommTopology({"A", "B", "A", "B"}, {-1, -1, -1, -1}, {}, "");
  EXPECT_EQ(t.plan.ring(), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(t.plan.networkHops, 2);
  EXPECT_EQ(t.plan.hostOf, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(t.source, "host identities");
  auto one = xccl::buildCommTopology(std::vector<std::string>(5, "A"), {}, {}, "");
  EXPECT_EQ(one.plan.ring(), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(one.plan.networkHops, 0);
}

TEST(CommTopology, DetectedTextsPlaceDevices) {
  std::string h0 =
      "system xdev\nhost n0\ndevices 4\nlink 0 2 XL 100\nlink 2 1 XL 100\nlink 1 3 XL 100\n";
  std::string h1 = "system xdev\nhost n1\ndevices 4\n";
  // ranks 0..3 on n0 with devices 0..3, ranks 4..7 on n1
  std::vector<std::string> ids = {"a", "a", "a", "a", "b", "b", "b", "b"};
  auto t = xccl::buildCommTopology(ids, {0, 1, 2, 3, 0, 1, 2, 3}, {h0, h1}, "");
  EXPECT_EQ(t.source, "detected");
  // Only 0-2-1-3 is all XL on host 0.
  EXPECT_EQ(std::vector<int>(t.plan.ring().begin(), t.plan.ring().begin() + 4),
            (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(t.plan.networkHops, 2);
  // A missing description (a host whose detection failed) falls back to host identities.
  auto f = xccl::buildCommTopology(ids, {0, 1, 2, 3, 0, 1, 2, 3}, {h0, ""}, "");
  EXPECT_EQ(f.source, "host identities");
}

TEST(CommTopology, TopoFileMustFitTheRanks) {
  char path[] = "/tmp/xccl-topo-testXXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "host only\ndevices 2\n";
  EXPECT_THROW(xccl::buildCommTopology({"a", "b"}, {0, 0}, {}, path), xccl::InvalidArgument);
  EXPECT_THROW(xccl::buildCommTopology({"a", "a", "a"}, {0, 1, 2}, {}, path),
               xccl::InvalidArgument);
  auto t = xccl::buildCommTopology({"a", "a"}, {1, 0}, {}, path);
  EXPECT_EQ(t.places[0].device, 1);
  std::remove(path);
}

TEST(Render, MatrixLegendRanksAndHtml) {
  System s = parseSystem(kDgxLike, "test");
  std::string m = hostMatrix(s, 0);
  EXPECT_NE(m.find("D0    X     XL"), std::string::npos) << m;
  EXPECT_NE(m.find("NIC1: eth1 100 Gbit/s, NUMA 1"), std::string::npos) << m;
  EXPECT_NE(m.find("PIX  = at most one PCIe switch"), std::string::npos) << m;
  std::vector<Place> places;
  for (int d = 0; d < 16; ++d) places.push_back(Place{s.devices[d].host, d});
  Plan plan = planRanks(s, places, 2);
  std::string r = rankMatrix(s, places, plan);
  EXPECT_NE(r.find("2 host(s), 2 network hop(s)"), std::string::npos) << r;
  std::string p = planText(s, places, plan);
  EXPECT_NE(p.find("ring 1:"), std::string::npos) << p;
  EXPECT_NE(p.find("columns (inter-host rings): [0 8]"), std::string::npos) << p;
  std::string h = htmlPage(s, &places, &plan);
  EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(h.find("<svg"), std::string::npos);
  EXPECT_EQ(h.find("<script"), std::string::npos);  // self-contained, nothing runs or loads
  EXPECT_NE(h.find("ring step 15: rank"), std::string::npos);
}

}  // namespace
