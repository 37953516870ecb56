// nccl-tests style report of xccl-tests (printed by global rank 0) and its JSON twin.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "options.h"

namespace xt {

struct PlaceStats {
  bool ran = false;   // false = not applicable, printed as N/A
  double timeUs = 0;  // aggregated over ranks per -a
  double algbw = 0;   // GB/s (1e9 B/s)
  double busbw = 0;
  int64_t wrong = 0;  // summed over ranks
  int64_t oob = 0;    // damaged guard bytes, summed over ranks
};

struct Row {
  Coll coll;
  size_t bytes = 0;
  size_t count = 0;
  xcclDataType_t type;
  std::string redop;               // "none" without an op
  int root = -1;                   // -1 for unrooted collectives
  PlaceStats place[2];             // 0 = out-of-place, 1 = in-place
  std::vector<std::string> notes;  // first wrong element per failing rank
  bool failed() const;
};

// --kill: the survivors' account of a lost rank (every survivor records it; the printer
// prints it).
struct Loss {
  std::vector<int> ranks;  // the ranks lost, as numbered at the start of the run
  int caseNo = 0;          // the case during which they were found gone
  std::string coll;
  size_t bytes = 0;
  int survivors = 0;
  double failMs = 0;    // case start -> this rank saw the operation fail (or the loss)
  double shrinkMs = 0;  // xcclCommShrink on this rank
};

class Report {
 public:
  // Every rank keeps the tally (so that a survivor can take over printing after a loss);
  // only the printer prints rows.
  Report(const Options& opt, int nranks, bool print) : opt_(opt), nranks_(nranks), print_(print) {}
  void setPrinting(bool print) { print_ = print; }
  void lost(const Loss& l);
  void header(const std::vector<std::string>& rankLines, const std::string& deviceKind);
  void tableHeader(Coll c);
  // Prints the row unless quiet; notes are always printed for failing rows.
  void row(const Row& r, bool quiet);
  void skipped(Coll c, xcclDataType_t t, const std::string& op, const std::string& why);
  // Footer: out-of-bounds total and average bus bandwidth (perf), or the conformance line.
  void footer();
  bool writeJson(const std::string& path, const std::vector<std::string>& rankLines) const;
  int64_t totalWrong() const { return wrong_; }
  int64_t totalOob() const { return oob_; }
  int64_t failedChecks() const { return failedChecks_; }

 private:
  const Options& opt_;
  int nranks_;
  bool print_;
  std::vector<Row> rows_;
  std::vector<Loss> losses_;
  std::vector<std::string> skips_;
  int64_t wrong_ = 0, oob_ = 0, checks_ = 0, failedChecks_ = 0;
  double bwSum_ = 0;
  int64_t bwCount_ = 0;
};

}  // namespace xt
