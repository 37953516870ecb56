// Command-line parsing for xccl-tests (see options.h and docs/XCCL_TESTS.md).
#include "options.h"

#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>

#ifdef XCCL_TESTS_HAVE_CLI11
#include <CLI/CLI.hpp>
#endif

namespace xt {
namespace {

[[noreturn]] void usageError(const std::string& msg) {
  std::fprintf(stderr, "xccl-tests: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

long toInt(const std::string& flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > hi) {
    usageError(flag + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
               "], got '" + v + "'");
  }
  return x;
}

size_t toSize(const std::string& flag, const std::string& v) {
  size_t x;
  if (!parseSize(v, &x))
    usageError(flag + " expects a size like 8, 64K, 128M or 1G, got '" + v + "'");
  return x;
}

// One command-line option: both parsers are generated from this table.
struct Spec {
  char shortName;  // 0 = long only
  const char* longName;
  const char* argName;  // nullptr = flag without argument
  const char* help;
  std::function<void(const std::string&)> set;
};

void setColl(Options& o, const std::string& v) {
  for (const std::string& name : splitList(v)) {
    if (name == "all") {
      o.allColls = true;
      continue;
    }
    Coll c;
    if (!parseColl(name, &c)) {
      usageError("unknown collective '" + name + "' (all_reduce, all_gather, reduce_scatter, " +
                 "broadcast, reduce, alltoall, sendrecv, gather, scatter, all)");
    }
    o.colls.push_back(c);
  }
}

std::vector<Spec> makeSpecs(Options& o, bool* help) {
  return {
      {'C', "coll", "NAME",
       "collective (also positional): all_reduce, all_gather, reduce_scatter, "
       "broadcast, reduce, alltoall, sendrecv, gather, scatter, or all (= --conformance)",
       [&o](const std::string& v) { setColl(o, v); }},
      {'b', "minbytes", "SIZE", "minimum size in bytes (K/M/G suffixes), default 32M",
       [&o](const std::string& v) { o.minBytes = toSize("-b", v); }},
      {'e', "maxbytes", "SIZE", "maximum size in bytes, default 32M",
       [&o](const std::string& v) { o.maxBytes = toSize("-e", v); }},
      {'f', "stepfactor", "F", "multiply the size by F each step (default 2)",
       [&o](const std::string& v) {
         o.stepFactor = std::atof(v.c_str());
         o.additiveStep = false;
         if (o.stepFactor <= 1.0) usageError("-f expects a factor > 1, got '" + v + "'");
       }},
      {'i', "stepbytes", "SIZE", "add SIZE bytes each step instead of multiplying",
       [&o](const std::string& v) {
         o.stepBytes = toSize("-i", v);
         o.additiveStep = true;
         if (o.stepBytes == 0) usageError("-i expects a positive size");
       }},
      {'o', "op", "OP",
       "sum|prod|min|max|avg|premulsum|band|bor|bxor|all (comma list ok), default sum",
       [&o](const std::string& v) {
         o.ops.clear();
         o.opsGiven = true;
         for (const std::string& name : splitList(v)) {
           if (name == "all") {
             o.opsAll = true;
             for (int i = 0; i < xcclNumOps; ++i) o.ops.push_back(static_cast<xcclRedOp_t>(i));
             continue;
           }
           xcclRedOp_t op;
           if (!parseOp(name, &op)) usageError("unknown op '" + name + "'");
           o.ops.push_back(op);
         }
       }},
      {'d', "datatype", "TYPE",
       "float|double|half|bfloat16|int8|uint8|int32|int64|bool|all "
       "(comma list ok), default float",
       [&o](const std::string& v) {
         o.types.clear();
         o.typesGiven = true;
         for (const std::string& name : splitList(v)) {
           if (name == "all") {
             o.typesAll = true;
             for (int i = 0; i < xcclNumTypes; ++i)
               o.types.push_back(static_cast<xcclDataType_t>(i));
             continue;
           }
           xcclDataType_t t;
           if (!parseType(name, &t)) usageError("unknown datatype '" + name + "'");
           o.types.push_back(t);
         }
       }},
      {'r', "root", "RANK", "root of broadcast/reduce/gather/scatter, default 0",
       [&o](const std::string& v) {
         o.root = static_cast<int>(toInt("-r", v, 0, 1 << 30));
         o.rootGiven = true;
       }},
      {'n', "iters", "N", "timed iterations, default 20",
       [&o](const std::string& v) { o.iters = static_cast<int>(toInt("-n", v, 0, 1 << 30)); }},
      {'w', "warmup_iters", "N", "warmup iterations per size, default 5",
       [&o](const std::string& v) { o.warmup = static_cast<int>(toInt("-w", v, 0, 1 << 30)); }},
      {'c', "check", "0|1", "check results (and guard regions), default 1",
       [&o](const std::string& v) { o.check = static_cast<int>(toInt("-c", v, 0, 1)); }},
      {'m', "agg_iters", "M", "operations aggregated in one xcclGroupStart/End, default 1",
       [&o](const std::string& v) { o.aggIters = static_cast<int>(toInt("-m", v, 1, 1 << 20)); }},
      {'z', "blocking", "0|1",
       "1: host operations block on the calling thread (XCCL_STREAM_CALLER, as the torch "
       "backend's blocking collectives and MPI calls do); 0: queued to the communicator's "
       "thread (default)",
       [&o](const std::string& v) { o.blocking = static_cast<int>(toInt("-z", v, 0, 1)); }},
      {'a', "average", "0-3", "time reported: 0 rank 0, 1 mean, 2 min, 3 max over ranks; default 1",
       [&o](const std::string& v) { o.average = static_cast<int>(toInt("-a", v, 0, 3)); }},
      {'J', "output_file", "FILE", "also write every result as JSON to FILE",
       [&o](const std::string& v) { o.jsonFile = v; }},
      {'t', "nthreads", "N", "ranks as threads per process, default 1",
       [&o](const std::string& v) { o.nthreads = static_cast<int>(toInt("-t", v, 1, 1024)); }},
      {'g', "ngpus", "N",
       "N ranks in this process on devices 0..N-1, their communicators made by one "
       "xcclCommInitAll (a thread drives each); alone, without -t or -p; default 1",
       [&o](const std::string& v) { o.ngpus = static_cast<int>(toInt("-g", v, 1, 1024)); }},
      {'p', "nprocs", "N", "fork N processes on this host (each with -t threads), default 1",
       [&o](const std::string& v) { o.nprocs = static_cast<int>(toInt("-p", v, 1, 1024)); }},
      {'T', "timeout", "SEC",
       "per-operation timeout of the communicator and rendezvous, default 300",
       [&o](const std::string& v) { o.timeoutSec = static_cast<int>(toInt("-T", v, 1, 1 << 24)); }},
      {'s', "seed", "N", "seed of the generated inputs, default 1",
       [&o](const std::string& v) { o.seed = static_cast<uint64_t>(toInt("-s", v, 0, 1L << 62)); }},
      {'D', "device", "host|xdev|cuda",
       "where buffers live: host memory (default), or device memory (xdev, or cuda in builds "
       "with CUDA) with every operation ordered on a stream of the device (rank i on device "
       "i modulo the device count; like nccl-tests on GPUs)",
       [&o](const std::string& v) {
         if (v != "host" && v != "xdev" && v != "cuda") {
           usageError("-D: unknown device '" + v + "' (host, xdev, cuda)");
         }
         o.device = v;
       }},
      {0, "conformance", nullptr,
       "run the conformance matrix (collectives x types x ops x sizes x "
       "in/out-of-place); exit 1 on any wrong or out-of-bounds element",
       [&o](const std::string&) { o.conformance = true; }},
      {0, "mem-alloc", nullptr,
       "buffers in memory the peers of this host can map (host: xcclMemAlloc; xdev: device "
       "memory), each registered with the communicator (xcclCommRegister): messages of "
       "XCCL_PEER_READ_MIN bytes or more are read in place (docs/MEMORY.md)",
       [&o](const std::string&) { o.memAlloc = true; }},
      {0, "reproducible", nullptr,
       "run with XCCL_REPRODUCIBLE=1 and check every floating reduction bit for bit against the "
       "left fold of the inputs in rank order, each step rounded to the type, on inputs of "
       "many magnitudes (where another order gives other bits); docs/ALGORITHMS.md",
       [&o](const std::string&) { o.reproducible = true; }},
      {0, "inject-fault", nullptr,
       "self-test of the checker: the last rank corrupts one element "
       "of every out-of-place result and one guard byte; every such check must then fail",
       [&o](const std::string&) { o.injectFault = true; }},
      {0, "kill", "R[:N]",
       "rank R SIGKILLs itself before case N (default 1; cases counted from 0 over the run); "
       "the survivors shrink (xcclCommShrink) and run the rest, checked for the smaller world. "
       "With -p and one rank per process",
       [&o](const std::string& v) {
         const size_t colon = v.find(':');
         o.killRank = static_cast<int>(toInt("--kill", v.substr(0, colon), 0, 1 << 20));
         if (colon != std::string::npos) {
           o.killCase = static_cast<int>(toInt("--kill", v.substr(colon + 1), 0, 1 << 30));
         }
       }},
      {'v', "verbose", nullptr, "conformance: print every row, not just failing ones",
       [&o](const std::string&) { o.verbose = true; }},
      {'h', "help", nullptr, "print this help", [help](const std::string&) { *help = true; }},
  };
}

const char* kSynopsis =
    "xccl-tests: conformance and performance tests for libxccl\n"
    "usage: xccl-tests [COLLECTIVE] [options]      e.g. xccl-tests all_reduce -t 4 -b 8 -e 1M\n"
    "       xccl-tests --conformance -t 4          (or: xccl-tests all)\n";

#ifndef XCCL_TESTS_HAVE_CLI11
void printFallbackHelp(const std::vector<Spec>& specs) {
  std::printf("%s\noptions:\n", kSynopsis);
  for (const Spec& s : specs) {
    std::string names = s.shortName ? std::string("-") + s.shortName + ", " : "    ";
    names += std::string("--") + s.longName;
    if (s.argName) names += std::string(" ") + s.argName;
    std::printf("  %-28s %s\n", names.c_str(), s.help);
  }
}

void parseWithGetopt(int argc, char** argv, std::vector<Spec>& specs, Options& o, bool* help) {
  std::string shortOpts;
  std::vector<option> longOpts;
  for (size_t k = 0; k < specs.size(); ++k) {
    const Spec& s = specs[k];
    if (s.shortName) {
      shortOpts += s.shortName;
      if (s.argName) shortOpts += ':';
    }
    longOpts.push_back({s.longName, s.argName ? required_argument : no_argument, nullptr,
                        static_cast<int>(256 + k)});
  }
  longOpts.push_back({nullptr, 0, nullptr, 0});
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, shortOpts.c_str(), longOpts.data(), nullptr)) != -1) {
    const Spec* hit = nullptr;
    if (ch >= 256) hit = &specs[ch - 256];
    for (const Spec& s : specs) {
      if (!hit && s.shortName == ch) hit = &s;
    }
    if (!hit) usageError(std::string("unknown or incomplete option '") + argv[optind - 1] + "'");
    hit->set(optarg ? optarg : "");
  }
  for (int k = optind; k < argc; ++k) setColl(o, argv[k]);
  if (*help) {
    printFallbackHelp(specs);
    std::exit(0);
  }
}
#endif

}  // namespace

bool parseSize(const std::string& s, size_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suffix(end);
  double mult = 1;
  if (suffix == "K" || suffix == "k")
    mult = 1024.0;
  else if (suffix == "M" || suffix == "m")
    mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (!suffix.empty())
    return false;
  if (v < 0 || end == s.c_str()) return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

Options parseOptions(int argc, char** argv) {
  Options o;
  bool help = false;
  std::vector<Spec> specs = makeSpecs(o, &help);
#ifdef XCCL_TESTS_HAVE_CLI11
  CLI::App app(kSynopsis, "xccl-tests");
  app.set_help_flag();  // our table has -h/--help
  for (Spec& s : specs) {
    std::string names = s.shortName ? std::string("-") + s.shortName + ",--" + s.longName
                                    : std::string("--") + s.longName;
    if (s.argName) {
      app.add_option_function<std::string>(names, s.set, s.help)->type_name(s.argName);
    } else {
      auto set = s.set;
      app.add_flag_callback(
          names, [set] { set(""); }, s.help);
    }
  }
  std::vector<std::string> positional;
  app.add_option("collective", positional, "collective name(s), as for --coll");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    usageError(e.what());
  }
  if (help) {
    std::printf("%s", app.help().c_str());
    std::exit(0);
  }
  for (const std::string& p : positional) setColl(o, p);
#else
  parseWithGetopt(argc, argv, specs, o, &help);
#endif
  if (o.allColls) o.conformance = true;
  if (o.minBytes > o.maxBytes) usageError("-b (minbytes) is larger than -e (maxbytes)");
  if (o.conformance) {
    if (!o.typesGiven) {
      o.types.clear();
      o.typesAll = true;
      for (int i = 0; i < xcclNumTypes; ++i) o.types.push_back(static_cast<xcclDataType_t>(i));
    }
    if (!o.opsGiven) {
      o.ops.clear();
      o.opsAll = true;
      for (int i = 0; i < xcclNumOps; ++i) o.ops.push_back(static_cast<xcclRedOp_t>(i));
    }
    if (o.colls.empty() || o.allColls) o.colls = allColls();
  } else if (o.colls.empty()) {
    usageError("which collective? e.g. 'xccl-tests all_reduce', or --conformance");
  }
  return o;
}

}  // namespace xt
