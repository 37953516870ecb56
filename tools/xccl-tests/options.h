// Command line of xccl-tests: nccl-tests' flags plus the tool's own (threads/processes,
// conformance matrix, JSON output). Parsed with CLI11 when the build found it, else with
// getopt_long from the same option table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colls.h"
#include "values.h"

namespace xt {

struct Options {
  std::vector<Coll> colls;  // empty until parsed; "all" selects every collective
  bool allColls = false;
  size_t minBytes = 32u << 20;
  size_t maxBytes = 32u << 20;
  size_t stepBytes = 1u << 20;
  double stepFactor = 2;
  bool additiveStep = false;  // -i given without -f
  std::vector<xcclRedOp_t> ops = {xcclSum};
  bool opsAll = false;  // -o all (or a list): skip unsupported combinations
  std::vector<xcclDataType_t> types = {xcclFloat32};
  bool typesAll = false;
  bool opsGiven = false, typesGiven = false;
  int root = 0;
  bool rootGiven = false;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  int aggIters = 1;
  int blocking = 0;  // -z: host ops on the calling thread (XCCL_STREAM_CALLER)
  int average = 1;   // 0 = rank 0, 1 = mean, 2 = min, 3 = max
  std::string jsonFile;
  int nthreads = 1;
  int nprocs = 1;
  int ngpus = 1;  // -g: ranks of this process made by one xcclCommInitAllConfig (one device each)
  int timeoutSec = 300;
  uint64_t seed = 1;
  bool conformance = false;
  bool verbose = false;
  bool injectFault = false;
  bool reproducible = false;  // --reproducible: XCCL_REPRODUCIBLE=1, references checked bit for bit
  bool memAlloc = false;      // --mem-alloc: buffers from xcclMemAlloc, registered with the comm
  int killRank = -1;  // --kill R[:N]: rank R dies before case N; the others shrink and go on
  int killCase = 1;
  std::string device =
      "host";  // -D/--device: "host" (host memory), "xdev" or "cuda" (device memory, streams)
  std::string launcher =
      "none";  // set by main(): which launcher environment was used  // self-test: corrupt each
               // result and a guard byte on the last rank
};

// Parses argv; on --help prints usage and exits 0; on a bad flag prints why and exits 2.
Options parseOptions(int argc, char** argv);

// "8", "64K", "128M", "1G" (binary multiples, as nccl-tests).
bool parseSize(const std::string& s, size_t* out);

}  // namespace xt
