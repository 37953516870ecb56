#include "topo_file.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/error.h"

namespace xccl {
namespace topo {

namespace {

// Bounds that keep a hostile or mistyped file from allocating without limit.
constexpr int kMaxHosts = 4096;
constexpr int kMaxDevicesPerHost = 1024;
constexpr int kMaxNuma = 64;
constexpr size_t kMaxText = 4 << 20;

class Parser {
 public:
  Parser(const std::string& origin) : origin_(origin) {}

  System run(const std::string& text) {
    if (text.size() > kMaxText) fail("larger than ", kMaxText, " bytes");
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      ++lineNo_;
      size_t hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      words_.clear();
      std::istringstream ws(line);
      for (std::string w; ws >> w;) words_.push_back(w);
      if (!words_.empty()) statement();
    }
    try {
      sys_.validate();
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(strCat(origin_, ": ", e.what()));
    }
    return sys_;
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw InvalidArgument(strCat(origin_, " line ", lineNo_, ": ", args...));
  }

  void statement() {
    const std::string& w = words_[0];
    if (w == "system") {
      expectCount(2, "system <kind>");
      sys_.deviceType = words_[1];
    } else if (w == "host") {
      if (words_.size() != 2 && words_.size() != 4) fail("expected 'host <name> [numa <n>]'");
      if (static_cast<int>(sys_.hosts.size()) >= kMaxHosts) fail("more than ", kMaxHosts, " hosts");
      int numa = words_.size() == 4 ? keyInt(2, "numa", 1, kMaxNuma) : 1;
      host_ = sys_.addHost(words_[1], numa);
    } else if (w == "device" || w == "devices") {
      needHost();
      size_t i = 1;
      int count = 1;
      if (w == "devices") {
        if (words_.size() < 2) fail("expected 'devices <count> [numa <k>]'");
        count = toInt(words_[1], 1, kMaxDevicesPerHost);
        i = 2;
      }
      int numa = 0;
      if (i < words_.size()) numa = keyInt(i, "numa", 0, sys_.hosts[host_].numaNodes - 1), i += 2;
      if (i != words_.size()) fail("unexpected '", words_[i], "'");
      if (static_cast<int>(sys_.hosts[host_].devices.size()) + count > kMaxDevicesPerHost) {
        fail("more than ", kMaxDevicesPerHost, " devices on host ", sys_.hosts[host_].name);
      }
      for (int k = 0; k < count; ++k) sys_.addDevice(host_, numa);
    } else if (w == "nic") {
      needHost();
      if (words_.size() < 2) fail("expected 'nic <name> [numa <k>] gbps <speed>'");
      int numa = 0;
      double gbps = -1;
      for (size_t i = 2; i < words_.size(); i += 2) {
        if (words_[i] == "numa") {
          numa = keyInt(i, "numa", 0, sys_.hosts[host_].numaNodes - 1);
        } else if (words_[i] == "gbps") {
          if (i + 1 >= words_.size()) fail("'gbps' needs a value");
          gbps = toDouble(words_[i + 1]);
        } else {
          fail("unexpected '", words_[i], "' (nic takes numa and gbps)");
        }
      }
      if (gbps <= 0) fail("nic ", words_[1], " needs 'gbps <speed>'");
      sys_.addNic(host_, words_[1], numa, gbps);
    } else if (w == "link" || w == "island") {
      needHost();
      std::vector<int> members;
      size_t k;  // index of the kind word
      if (w == "link") {
        if (words_.size() < 4) fail("expected 'link <a> <b> <kind> [GB/s]'");
        members = {ordinal(words_[1]), ordinal(words_[2])};
        if (members[0] == members[1]) fail("a link joins two different devices");
        k = 3;
      } else {
        if (words_.size() < 3) fail("expected 'island <list> <kind> [GB/s]'");
        members = ordinalList(words_[1]);
        k = 2;
      }
      LinkKind kind;
      if (!parseLinkKind(words_[k], &kind) || kind == LinkKind::kSelf || kind == LinkKind::kNet) {
        fail("unknown link kind '", words_[k], "' (XL PIX PXB PHB NODE SYS)");
      }
      double gbs = defaultLinkGBs(kind);
      if (k + 1 < words_.size()) gbs = toDouble(words_[k + 1]);
      if (k + 2 < words_.size()) fail("unexpected '", words_[k + 2], "'");
      for (size_t i = 0; i < members.size(); ++i) {
        for (size_t j = i + 1; j < members.size(); ++j) {
          sys_.addLink(sys_.deviceAt(host_, members[i]), sys_.deviceAt(host_, members[j]), kind,
                       gbs);
        }
      }
    } else {
      fail("unknown statement '", w, "' (system host device devices nic link island)");
    }
  }

  void needHost() const {
    if (host_ < 0) fail("'", words_[0], "' before any 'host' line");
  }
  void expectCount(size_t n, const char* form) const {
    if (words_.size() != n) fail("expected '", form, "'");
  }
  int toInt(const std::string& s, long lo, long hi) const {
    errno = 0;
    char* end = nullptr;
    long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
      fail("'", s, "' is not a whole number in ", lo, "..", hi);
    }
    return static_cast<int>(v);
  }
  double toDouble(const std::string& s) const {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(v) || v < 1e-6 || v > 1e9) {
      fail("'", s, "' is not a bandwidth (1e-6 .. 1e9)");
    }
    return v;
  }
  int keyInt(size_t i, const char* key, long lo, long hi) const {
    if (words_[i] != key || i + 1 >= words_.size()) fail("expected '", key, " <n>'");
    return toInt(words_[i + 1], lo, hi);
  }
  int ordinal(const std::string& s) const {
    int n = static_cast<int>(sys_.hosts[host_].devices.size());
    if (n == 0) fail("no devices on host ", sys_.hosts[host_].name, " yet");
    return toInt(s, 0, n - 1);
  }
  // "0-3", "0,2,4", "0-1,6-7"
  std::vector<int> ordinalList(const std::string& s) const {
    std::vector<int> out;
    std::istringstream parts(s);
    for (std::string part; std::getline(parts, part, ',');) {
      size_t dash = part.find('-');
      int lo = ordinal(part.substr(0, dash));
      int hi = dash == std::string::npos ? lo : ordinal(part.substr(dash + 1));
      if (hi < lo) fail("empty range '", part, "'");
      for (int v = lo; v <= hi; ++v) out.push_back(v);
    }
    if (out.size() < 2) fail("an island needs two devices or more");
    return out;
  }

  std::string origin_;
  System sys_;
  int host_ = -1;
  int lineNo_ = 0;
  std::vector<std::string> words_;
};

}  // namespace

System parseSystem(const std::string& text, const std::string& origin) {
  return Parser(origin).run(text);
}

System loadSystemFile(const std::string& path) {
  std::ifstream f(path);
  XCCL_CHECK_ARG(f.good(), "topology file ", path, " cannot be read: ", errnoString(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return parseSystem(ss.str(), "topology file " + path);
}

std::string formatSystem(const System& sys) {
  std::ostringstream os;
  os << "# xccl topology (XCCL_TOPO_FILE format: csrc/collectives/topology/topo_file.h)\n";
  os << "system " << sys.deviceType << "\n";
  for (size_t h = 0; h < sys.hosts.size(); ++h) {
    const Host& host = sys.hosts[h];
    os << "host " << host.name << " numa " << host.numaNodes << "\n";
    for (int d : host.devices) os << "device numa " << sys.devices[d].numa << "\n";
    for (int n : host.nics) {
      const Nic& nic = sys.nics[n];
      os << "nic " << nic.name << " numa " << nic.numa << " gbps " << nic.gbps << "\n";
    }
    for (const Link& l : sys.links) {
      if (sys.devices[l.a].host != static_cast<int>(h)) continue;
      os << "link " << sys.devices[l.a].local << " " << sys.devices[l.b].local << " "
         << linkKindName(l.kind) << " " << l.gbs << "\n";
    }
  }
  return os.str();
}

}  // namespace topo
}  // namespace xccl
