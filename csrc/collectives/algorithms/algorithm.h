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
//
// Files: registry.cc (the list, XCCL_ALGO parsed), select.cc (knobs, tuning table, choice),
// validate.cc (validateCollArgs), run_collective.cc (runCollective: semantics above the
// algorithms, such as Avg and PremulSum).
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
  // Every element of a reduction's result is the left fold of the inputs in rank order,
  // ((in0 op in1) op in2) ..., whatever the size and the placement of the ranks: the
  // algorithms XCCL_REPRODUCIBLE=1 chooses among.
  bool ordered = false;
  // Compares every rank's call itself (each rank reads every other's signature): no desync
  // check frame is posted for it (Exchange::postCheck).
  bool checksCalls = false;
};

const std::vector<Algorithm>& allAlgorithms();
// The algorithm of `type` named `name`, or nullptr.
const Algorithm* findAlgorithm(CollType type, const std::string& name);
// XCCL_ALGO parsed and checked: the algorithm it forces for each collective ("" for
// automatic choice), indexed by CollType. InvalidUsage for an unknown collective or name.
std::vector<std::string> parseForced(const std::string& spec);
// The algorithm to use for args (honours XCCL_ALGO). Throws InvalidUsage if XCCL_ALGO
// forces an algorithm that declines the call.
const Algorithm& selectAlgorithm(const CollArgs& args, Exchange& ex);
// The choice selectAlgorithm would make if the algorithm named `declined` declined the call:
// for an algorithm that learns only while it runs (from every rank) that it cannot serve it.
const Algorithm& selectAlgorithmAfter(const CollArgs& args, Exchange& ex, const char* declined);
// Throws InvalidArgument naming the collective and the bad value (dtype, op, root, peer,
// counts, NULL buffers). The API edge calls it before enqueueing, so a bad argument is
// returned to the caller and never fails the communicator.
void validateCollArgs(const CollArgs& args, int rank, int nranks);
// Runs one whole collective: argument semantics that sit above the algorithms (PremulSum
// scaling, Avg division, zero counts) and then the selected algorithm.
void runCollective(Exchange& ex, const CollArgs& args);
// "1048576 x float32 on 4 ranks": a call's size, for messages and traces.
std::string describeSize(const CollArgs& args, const Exchange& ex);

}  // namespace xccl
