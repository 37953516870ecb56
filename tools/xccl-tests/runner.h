// One rank of xccl-tests: creates its communicator, runs the selected tests (performance
// sweep or conformance matrix) and, on global rank 0, prints the nccl-tests style report.
#pragma once

#include "xccl.h"

#include <string>

#include "options.h"

namespace xt {

struct RankSetup {
  int rank = 0;
  int nranks = 1;
  int group = 0;              // process index (the "Group" of the header)
  int device = -1;            // xcclConfig_t::device
  xcclComm_t comm = nullptr;  // -g: made already (xcclCommInitAllConfig); else the rank makes it
  std::string oobHost;
  int oobPort = 0;
  int oobTimeoutSec = 300;
};

// Exit codes shared by every rank and process.
enum ExitCode { kExitOk = 0, kExitWrong = 1, kExitUsage = 2, kExitFailure = 3 };

// Runs one rank to completion; every rank of a run returns the same code unless one fails.
int runRank(const Options& opt, const RankSetup& setup);

}  // namespace xt
