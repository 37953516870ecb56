// Algorithm registry and selection.
//
// Each algorithm implements one collective type and may decline a call it is not suited
// for (supports() == false); the selector then falls back to the next candidate. No
// algorithm special-cases what another one handles better.
//
// Selection: XCCL_ALGO forces a choice, either one name for every collective that has an
// algorithm of that name ("ring") or per collective ("allreduce=direct,broadcast=chain").
// Otherwise candidates are tried in the order of the tuning table in select.cc (by message
// size and world size).
#pragma once

#include <string>
#include <vector>

#include "exchange.h"

namespace xccl {

struct Algorithm {
  const char* name;  // "ring", "direct", "chain", "pairwise", ...
  CollType type;
  bool (*supports)(const CollArgs& args, const Exchange& ex);
  void (*run)(Exchange& ex, const CollArgs& args);
  // Every rank receives at least one message from its ring predecessor (Exchange::ringPrev)
  // whenever count > 0: the frame headers then compare the two calls, and the desync check
  // frame (Exchange::postCheck) would only repeat it, one frame per operation.
  bool hearsRingPrev = false;
};

const std::vector<Algorithm>& allAlgorithms();
// The algorithm to use for args (honours XCCL_ALGO). Throws InvalidUsage if XCCL_ALGO
// forces an algorithm that declines the call.
const Algorithm& selectAlgorithm(const CollArgs& args, Exchange& ex);
// Throws InvalidArgument naming the collective and the bad value (dtype, op, root, peer,
// counts, NULL buffers). The API edge calls it before enqueueing, so a bad argument is
// returned to the caller and never fails the communicator.
void validateCollArgs(const CollArgs& args, int rank, int nranks);
// Runs one whole collective: argument semantics that sit above the algorithms (PremulSum
// scaling, Avg division, zero counts) and then the selected algorithm.
void runCollective(Exchange& ex, const CollArgs& args);

}  // namespace xccl
