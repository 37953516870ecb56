// xccl-topo simulate: see simulate.h.
#include "simulate.h"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "collectives/algorithms/algorithm.h"
#include "collectives/algorithms/cost.h"
#include "collectives/device/device.h"
#include "common/error.h"

namespace xccl_topo {

using xccl::CollType;
using xccl::InvalidArgument;
using xccl::strCat;
using namespace xccl::topo;  // NOLINT(google-build-using-namespace)

std::vector<size_t> parseSizes(const std::string& text) {
  std::vector<size_t> out;
  std::stringstream in(text);
  std::string tok;
  while (std::getline(in, tok, ',')) {
    if (tok.empty()) continue;
    size_t mult = 1;
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(tok.back())));
    if (unit == 'K' || unit == 'M' || unit == 'G') {
      mult = unit == 'K' ? size_t{1} << 10 : unit == 'M' ? size_t{1} << 20 : size_t{1} << 30;
      tok.pop_back();
    }
    size_t used = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != tok.size() || v == 0) {
      throw InvalidArgument(strCat("--sizes: '", tok, "' is not a positive size (8, 64K, 1M, 2G)"));
    }
    out.push_back(static_cast<size_t>(v) * mult);
  }
  if (out.empty()) throw InvalidArgument("--sizes: no size given");
  return out;
}

System replicateHosts(const System& one, int hosts) {
  if (hosts < 1 || one.hosts.empty()) throw InvalidArgument("--hosts: need a host to copy");
  const Host& h0 = one.hosts.front();
  System sys;
  sys.deviceType = one.deviceType;
  for (int i = 0; i < hosts; ++i) {
    const int h = sys.addHost(strCat(h0.name, "-", i), h0.numaNodes);
    const int base = static_cast<int>(sys.devices.size());
    for (int d : h0.devices) sys.addDevice(h, one.devices[d].numa);
    for (int k : h0.nics) sys.addNic(h, one.nics[k].name, one.nics[k].numa, one.nics[k].gbps);
    for (const Link& l : one.links) {
      if (one.devices[l.a].host != 0) continue;
      sys.addLink(base + one.devices[l.a].local, base + one.devices[l.b].local, l.kind, l.gbs);
    }
  }
  sys.validate();
  return sys;
}

namespace {

CollType collType(const std::string& name) {
  if (name == "allreduce") return CollType::kAllReduce;
  if (name == "broadcast") return CollType::kBroadcast;
  if (name == "reduce") return CollType::kReduce;
  if (name == "allgather") return CollType::kAllGather;
  if (name == "reducescatter") return CollType::kReduceScatter;
  throw InvalidArgument(strCat("--coll ", name,
                               ": the model covers allreduce, broadcast, "
                               "reduce, allgather and reducescatter"));
}

std::string sizeLabel(size_t b) {
  if (b >= (size_t{1} << 30) && b % (size_t{1} << 30) == 0) return strCat(b >> 30, " GiB");
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return strCat(b >> 20, " MiB");
  if (b >= 1024 && b % 1024 == 0) return strCat(b >> 10, " KiB");
  return strCat(b, " B");
}

std::string fmt(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, v);
  return buf;
}

// busbw as xccl-tests reports it (docs/XCCL_TESTS.md).
double busbw(CollType t, size_t bytes, int n, double us) {
  if (us <= 0) return 0;
  const double algbw = static_cast<double>(bytes) / (us * 1e3);
  if (t == CollType::kAllReduce) return algbw * 2.0 * (n - 1) / n;
  if (t == CollType::kAllGather || t == CollType::kReduceScatter) return algbw * (n - 1) / n;
  return algbw;
}

}  // namespace

std::string simulate(const System& sys, const std::vector<Place>& places,
                     const SimulateOptions& opt) {
  const CollType type = collType(opt.coll);
  xccl::CostParams params;
  if (!opt.paramsFile.empty()) {
    std::ifstream f(opt.paramsFile);
    if (!f) throw InvalidArgument("cannot read " + opt.paramsFile);
    std::stringstream text;
    text << f.rdbuf();
    params = xccl::CostParams::parse(text.str());
  }
  if (opt.cores >= 0) params.cores = opt.cores;
  const Plan plan = planRanks(sys, places, 1);
  const int n = plan.nranks();
  // The NICs: every host alike or not, the slowest host's (the ring and the trees wait for
  // it). Device links: the slowest intra-host edge of ring 0.
  xccl::SystemRates rates;
  double net = std::numeric_limits<double>::infinity();
  for (size_t h = 0; h < sys.hosts.size() && sys.hosts.size() > 1; ++h) {
    net = std::min(net, sys.hostNetGBs(static_cast<int>(h)));
  }
  rates.netGBs = net < std::numeric_limits<double>::infinity() ? net : 0;
  double intra = std::numeric_limits<double>::infinity();
  const std::vector<int>& ring = plan.ring();
  for (size_t i = 0; i < ring.size() && n > 1; ++i) {
    const int a = ring[i], b = ring[(i + 1) % ring.size()];
    if (places[a].device < 0 || places[b].device < 0 || places[a].host != places[b].host) continue;
    intra = std::min(intra, rankPath(sys, places, a, b).gbs);
  }
  rates.intraGBs = intra < std::numeric_limits<double>::infinity() ? intra : 0;
  // The selector's view: an Exchange over the plan, as a rank of it would have.
  std::atomic<bool> abortFlag{false};
  xccl::Exchange ex(0, n, xccl::getDevice("host", 0), std::vector<xccl::Connection*>(n, nullptr),
                    plan.ring(), abortFlag);
  ex.setHosts(plan.hosts);

  std::ostringstream text, json;
  text << "simulated " << opt.coll << ", " << n << " ranks on " << plan.hosts.size()
       << " host(s) (cost parameters: "
       << (opt.paramsFile.empty() ? "built-in defaults" : opt.paramsFile)
       << (params.cores > 0 ? strCat(", ", params.cores, " cores per host") : std::string())
       << "); * = the selector's pick, < = the model's fastest\n";
  json << "{\"coll\": \"" << opt.coll << "\", \"nranks\": " << n
       << ", \"hosts\": " << plan.hosts.size() << ", \"cores\": " << params.cores
       << ", \"sizes\": [";
  bool firstSize = true;
  for (size_t bytes : opt.sizes) {
    xccl::CollArgs args;
    args.type = type;
    args.dtype = xcclFloat32;
    args.count = bytes / 4;
    // allgather's and reducescatter's count is each rank's share (the whole buffer / n)
    if (type == CollType::kAllGather || type == CollType::kReduceScatter) args.count /= n;
    const std::string picked = n > 1 ? xccl::selectAlgorithm(args, ex).name : "local";
    struct Row {
      std::string name;
      xccl::CostFeatures f;
      double us;
    };
    std::vector<Row> rows;
    for (const std::string& name : xccl::modelledAlgorithms(type)) {
      const xccl::Algorithm* alg = xccl::findAlgorithm(type, name);
      if (alg == nullptr || n < 2 || !alg->supports(args, ex)) continue;
      xccl::CostFeatures f = xccl::costFeatures(name, type, bytes, plan, params.cores);
      rows.push_back(Row{name, f, xccl::predictUs(f, params, rates)});
    }
    size_t best = 0;
    for (size_t i = 1; i < rows.size(); ++i) {
      if (rows[i].us < rows[best].us) best = i;
    }
    text << "  " << sizeLabel(bytes) << ":";
    for (size_t i = 0; i < rows.size(); ++i) {
      text << "  " << rows[i].name << (rows[i].name == picked ? "*" : "") << (i == best ? "<" : "")
           << " " << fmt(rows[i].us, rows[i].us < 100 ? 1 : 0) << " us ("
           << fmt(busbw(type, bytes, n, rows[i].us), 2) << " GB/s)";
    }
    text << "\n";
    json << (firstSize ? "" : ", ") << "{\"bytes\": " << bytes << ", \"selected\": \"" << picked
         << "\", \"algorithms\": [";
    firstSize = false;
    for (size_t i = 0; i < rows.size(); ++i) {
      const xccl::CostFeatures& f = rows[i].f;
      json << (i ? ", " : "") << "{\"name\": \"" << rows[i].name << "\", \"us\": " << rows[i].us
           << ", \"busbw\": " << busbw(type, bytes, n, rows[i].us)
           << ", \"features\": {\"shm_hops\": " << f.shmHops << ", \"net_hops\": " << f.netHops
           << ", \"shm_bytes\": " << f.shmBytes << ", \"net_bytes\": " << f.netBytes
           << ", \"reduce_bytes\": " << f.reduceBytes << ", \"messages\": " << f.messages << "}}";
    }
    json << "]}";
  }
  json << "], \"system_net_gbs\": " << rates.netGBs << ", \"system_intra_gbs\": " << rates.intraGBs
       << "}\n";
  return opt.json ? json.str() : text.str();
}

}  // namespace xccl_topo
