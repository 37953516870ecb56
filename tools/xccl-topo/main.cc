// xccl-topo: the cntopo / `nvidia-smi topo -m` role for xccl (docs/TOPOLOGY.md).
//
//   xccl-topo [-d xdev|cuda|host]            this host's matrix with a legend
//   xccl-topo --dump [-o F]                  this host in XCCL_TOPO_FILE format
//   xccl-topo matrix --topo-file F           every host of a described system
//   xccl-topo rings --topo-file F --nranks N [--ranks-per-host K] [--channels C]
//                                            the rings, hierarchy and algorithm per size
//   xccl-topo show --html out.html [--topo-file F] [--nranks N]
//                                            a self-contained page drawing the system
//   xccl-topo simulate [--topo-file F] [--hosts H] --nranks N [--coll allreduce|broadcast|...]
//                      [--sizes 8,64K,1M] [--params F] [--cores C] [--json]
//                                            predicted time per algorithm, and the
//                                            selector's pick (docs/SIMULATOR.md)
#include <CLI/CLI.hpp>

#include <atomic>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithm.h"
#include "collectives/device/device.h"
#include "collectives/topology/detect.h"
#include "collectives/topology/plan.h"
#include "collectives/topology/render.h"
#include "collectives/topology/topo_file.h"
#include "common/error.h"
#include "simulate.h"

namespace {

using namespace xccl::topo;

// "auto": CUDA when this build and machine have GPUs, else xdev.
std::string resolveKind(const std::string& kind) {
  if (kind != "auto") return kind;
  return xccl::deviceWiring("cuda").count > 0 ? "cuda" : "xdev";
}

System loadOrDetect(const std::string& file, const std::string& kind) {
  return file.empty() ? detectHost(resolveKind(kind)) : loadSystemFile(file);
}

// Ranks placed host by host: `perHost` ranks on each host's devices 0, 1, ... (ranks beyond a
// host's devices, or on a system without devices, share host memory).
std::vector<Place> placeRanks(const System& sys, int nranks, int perHost) {
  const int hosts = static_cast<int>(sys.hosts.size());
  if (perHost <= 0) {
    if (nranks % hosts != 0) {
      throw xccl::InvalidArgument(xccl::strCat(nranks, " ranks do not divide over ", hosts,
                                               " host(s); give --ranks-per-host"));
    }
    perHost = nranks / hosts;
  }
  if (static_cast<long>(perHost) * hosts < nranks) {
    throw xccl::InvalidArgument(
        xccl::strCat(nranks, " ranks do not fit on ", hosts, " host(s) of ", perHost, " rank(s)"));
  }
  std::vector<Place> places;
  for (int r = 0; r < nranks; ++r) {
    int host = r / perHost, local = r % perHost;
    places.push_back(Place{host, sys.deviceAt(host, local)});
  }
  return places;
}

// What the selector picks for allreduce and friends at a few sizes on this plan.
std::string algorithmTable(const Plan& plan) {
  const int n = plan.nranks();
  std::atomic<bool> abortFlag{false};
  xccl::Exchange ex(0, n, xccl::getDevice("host", 0), std::vector<xccl::Connection*>(n, nullptr),
                    plan.ring(), abortFlag);
  ex.setHosts(plan.hosts);
  std::ostringstream os;
  os << "algorithm by size (float32, this libxccl's defaults and XCCL_* knobs):\n";
  os << "  size        allreduce     broadcast     allgather     reducescatter\n";
  for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{1} << 20, size_t{64} << 20}) {
    std::string label = bytes < 1024        ? std::to_string(bytes) + " B"
                        : bytes < (1 << 20) ? std::to_string(bytes >> 10) + " KiB"
                                            : std::to_string(bytes >> 20) + " MiB";
    os << "  " << label << std::string(12 - label.size(), ' ');
    for (xccl::CollType t : {xccl::CollType::kAllReduce, xccl::CollType::kBroadcast,
                             xccl::CollType::kAllGather, xccl::CollType::kReduceScatter}) {
      xccl::CollArgs a;
      a.type = t;
      a.dtype = xcclFloat32;
      a.count = bytes / 4;
      if (t == xccl::CollType::kAllGather || t == xccl::CollType::kReduceScatter) a.count /= n;
      std::string name = n > 1 ? xccl::selectAlgorithm(a, ex).name : "local";
      os << name
         << (t == xccl::CollType::kReduceScatter
                 ? ""
                 : std::string(name.size() < 14 ? 14 - name.size() : 1, ' '));
    }
    os << "\n";
  }
  return os.str();
}

void writeOut(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    return;
  }
  std::ofstream f(path);
  if (!(f << text)) throw xccl::InvalidArgument("cannot write " + path);
  std::cerr << "xccl-topo: wrote " << path << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xccl-topo: topology of this host or of a described system (docs/TOPOLOGY.md)"};
  std::string kind = "auto", topoFile, out, html;
  bool dump = false;
  int nranks = 0, perHost = 0, channels = 2;
  app.add_option("-d,--device", kind, "device kind to detect: auto, xdev, cuda, host")
      ->capture_default_str();
  app.add_flag("--dump", dump, "print this host in XCCL_TOPO_FILE format");
  app.add_option("-o,--output", out, "write to this file instead of stdout");
  auto* matrix = app.add_subcommand("matrix", "the matrix of every host (default: this host)");
  matrix->add_option("--topo-file", topoFile, "a described system (XCCL_TOPO_FILE format)");
  auto* rings = app.add_subcommand("rings", "plan rings, hierarchy and algorithms for N ranks");
  rings->add_option("--topo-file", topoFile, "a described system (default: this host)");
  rings->add_option("-n,--nranks", nranks, "ranks")->required()->check(CLI::Range(1, 1 << 16));
  rings->add_option("--ranks-per-host", perHost, "ranks per host (default: nranks / hosts)");
  rings->add_option("--channels", channels, "rings to plan")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  auto* show = app.add_subcommand("show", "write an HTML page that draws the system");
  show->add_option("--html", html, "the page to write")->required();
  show->add_option("--topo-file", topoFile, "a described system (default: this host)");
  show->add_option("-n,--nranks", nranks, "also plan and draw ring 0 for N ranks");
  show->add_option("--ranks-per-host", perHost, "ranks per host (default: nranks / hosts)");
  auto* sim = app.add_subcommand("simulate", "predict each algorithm's time (the cost model)");
  xccl_topo::SimulateOptions so;
  std::string sizes = "8,64K,1M,16M,256M";
  int hosts = 0;
  sim->add_option("--topo-file", topoFile, "a described system (default: this host)");
  sim->add_option("--hosts", hosts, "copy the system's first host this many times")
      ->check(CLI::Range(1, 1 << 16));
  sim->add_option("-n,--nranks", nranks, "ranks")->required()->check(CLI::Range(1, 1 << 20));
  sim->add_option("--ranks-per-host", perHost, "ranks per host (default: nranks / hosts)");
  sim->add_option("--coll", so.coll, "allreduce, broadcast, reduce, allgather, reducescatter")
      ->capture_default_str();
  sim->add_option("--sizes", sizes, "bytes of the buffer, comma-separated (K, M, G)")
      ->capture_default_str();
  sim->add_option("--params", so.paramsFile, "cost parameters (bench/bench_simulate.py fits them)");
  sim->add_option("--cores", so.cores, "usable cores per host (default: the parameters')");
  sim->add_flag("--json", so.json, "one JSON object: each algorithm's features and time");
  CLI11_PARSE(app, argc, argv);
  try {
    if (dump) {
      writeOut(out, formatSystem(loadOrDetect(topoFile, kind)));
      return 0;
    }
    // simulate models ranks that share host memory unless told of devices (-d or a file).
    System sys = loadOrDetect(topoFile, *sim && kind == "auto" ? "host" : kind);
    if (*sim) {
      if (hosts > 0) sys = xccl_topo::replicateHosts(sys, hosts);
      so.sizes = xccl_topo::parseSizes(sizes);
      writeOut(out, xccl_topo::simulate(sys, placeRanks(sys, nranks, perHost), so));
      return 0;
    }
    if (*rings) {
      std::vector<Place> places = placeRanks(sys, nranks, perHost);
      Plan plan = planRanks(sys, places, channels);
      writeOut(out, planText(sys, places, plan) + algorithmTable(plan));
      return 0;
    }
    if (*show) {
      if (nranks > 0) {
        std::vector<Place> places = placeRanks(sys, nranks, perHost);
        Plan plan = planRanks(sys, places, 1);
        writeOut(html, htmlPage(sys, &places, &plan));
      } else {
        writeOut(html, htmlPage(sys, nullptr, nullptr));
      }
      return 0;
    }
    std::string text;
    for (size_t h = 0; h < sys.hosts.size(); ++h) {
      std::string m = hostMatrix(sys, static_cast<int>(h));
      // The legend once, after the last host.
      if (h + 1 < sys.hosts.size()) m = m.substr(0, m.find("Legend:"));
      text += m + (h + 1 < sys.hosts.size() ? "\n" : "");
    }
    writeOut(out, text);
  } catch (const std::exception& e) {
    std::cerr << "xccl-topo: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
