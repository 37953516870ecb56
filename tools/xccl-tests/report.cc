// nccl-tests style report and JSON output (see report.h).
#include "report.h"

#include <cstring>

namespace xt {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string timeStr(double us) {
  if (us >= 1e4) return fmt("%.0f", us);
  if (us >= 100) return fmt("%.1f", us);
  return fmt("%.2f", us);
}

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

std::string jsonPlace(const PlaceStats& p) {
  if (!p.ran) return "null";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"time_us\": %.3f, \"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, \"wrong\": %lld, "
                "\"out_of_bounds\": %lld}",
                p.timeUs, p.algbw, p.busbw, static_cast<long long>(p.wrong),
                static_cast<long long>(p.oob));
  return buf;
}

}  // namespace

bool Row::failed() const {
  for (const PlaceStats& p : place) {
    if (p.ran && (p.wrong > 0 || p.oob > 0)) return true;
  }
  return false;
}

void Report::header(const std::vector<std::string>& rankLines, const std::string& deviceKind) {
  int version = 0;
  xcclGetVersion(&version);
  std::string step = opt_.additiveStep ? std::to_string(opt_.stepBytes) + "(bytes)"
                                       : fmt("%g", opt_.stepFactor) + "(factor)";
  std::printf("# xccl-tests %s  (libxccl %d.%d.%d, device %s)\n",
              opt_.conformance ? "conformance" : "performance", version / 10000,
              version / 100 % 100, version % 100, deviceKind.c_str());
  if (opt_.conformance) {
    std::printf(
        "# nThread %d nProcs %d nRanks %d sizes: 0, 1, 3, 17, 1KiB+5 and 64KiB per buffer "
        "validation: 1 seed: %llu timeout: %d s\n",
        opt_.nthreads, opt_.nprocs, nranks_, static_cast<unsigned long long>(opt_.seed),
        opt_.timeoutSec);
  } else {
    std::printf(
        "# nThread %d nProcs %d nRanks %d minBytes %zu maxBytes %zu step: %s warmup iters: %d "
        "iters: %d agg iters: %d validation: %d average: %d seed: %llu timeout: %d s\n",
        opt_.nthreads, opt_.nprocs, nranks_, opt_.minBytes, opt_.maxBytes, step.c_str(),
        opt_.warmup, opt_.iters, opt_.aggIters, opt_.check, opt_.average,
        static_cast<unsigned long long>(opt_.seed), opt_.timeoutSec);
  }
  std::printf("# launcher: %s\n#\n# Using devices\n", opt_.launcher.c_str());
  for (const std::string& l : rankLines) std::printf("#  %s\n", l.c_str());
  std::printf("#\n");
  std::fflush(stdout);
}

void Report::tableHeader(Coll c) {
  char cols[128];
  std::snprintf(cols, sizeof cols, "%12s  %12s  %8s  %9s  %6s", "size", "count", "type", "redop",
                "root");
  char units[128];
  std::snprintf(units, sizeof units, "%12s  %12s  %8s  %9s  %6s", "(B)", "(elements)", "", "", "");
  cols[0] = units[0] = '#';
  const char* place = "  %7s  %7s  %7s  %6s";
  char p1[64], p2[64];
  std::snprintf(p1, sizeof p1, place, "time", "algbw", "busbw", "#wrong");
  std::snprintf(p2, sizeof p2, place, "(us)", "(GB/s)", "(GB/s)", "");
  std::printf("#\n# Collective: %s   busbw = algbw * %s\n", collInfo(c).name,
              c == Coll::kAllReduce                                                   ? "2(n-1)/n"
              : (c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kSendRecv) ? "1"
                                                                                      : "(n-1)/n");
  std::printf("#%*s%22s%13s%20s\n", static_cast<int>(std::strlen(cols)) - 1, "", "out-of-place", "",
              "in-place");
  std::printf("%s%s%s\n%s%s%s\n", cols, p1, p1, units, p2, p2);
  std::fflush(stdout);
}

void Report::row(const Row& r, bool quiet) {
  rows_.push_back(r);
  bool bad = r.failed();
  for (const PlaceStats& p : r.place) {
    if (!p.ran) continue;
    ++checks_;
    if (p.wrong > 0 || p.oob > 0) ++failedChecks_;
    wrong_ += p.wrong;
    oob_ += p.oob;
    bwSum_ += p.busbw;
    ++bwCount_;
  }
  if (!print_ || (quiet && !bad)) return;
  std::printf("%12zu  %12zu  %8s  %9s  %6d", r.bytes, r.count, typeInfo(r.type).name,
              r.redop.c_str(), r.root);
  for (const PlaceStats& p : r.place) {
    if (!p.ran) {
      std::printf("  %7s  %7s  %7s  %6s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    std::printf("  %7s  %7.2f  %7.2f  %6lld", timeStr(p.timeUs).c_str(), p.algbw, p.busbw,
                static_cast<long long>(p.wrong + p.oob));
  }
  std::printf("%s\n", bad ? "  <-- FAILED" : "");
  if (bad && quiet) {  // in the conformance matrix, say which case this was
    std::printf("#   ^ %s\n", collInfo(r.coll).name);
  }
  for (const std::string& n : r.notes) std::printf("#   %s\n", n.c_str());
  std::fflush(stdout);
}

void Report::lost(const Loss& l) {
  losses_.push_back(l);
  nranks_ = l.survivors;
  if (!print_) return;
  std::string ranks;
  for (int r : l.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  std::printf(
      "# lost rank %s during case %d (%s, %zu B): the operation failed after %.1f ms, "
      "xcclCommShrink took %.1f ms; %d ranks from here, the case runs again\n",
      ranks.c_str(), l.caseNo, l.coll.c_str(), l.bytes, l.failMs, l.shrinkMs, l.survivors);
  std::fflush(stdout);
}

void Report::skipped(Coll c, xcclDataType_t t, const std::string& op, const std::string& why) {
  skips_.push_back(std::string(collInfo(c).name) + " " + typeInfo(t).name + " " + op + ": " + why);
}

void Report::footer() {
  std::printf("#\n# Out of bounds values : %lld %s\n", static_cast<long long>(oob_),
              oob_ == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g\n",
              bwCount_ ? bwSum_ / static_cast<double>(bwCount_) : 0.0);
  if (!skips_.empty()) {
    std::printf("# Skipped %zu unsupported combinations (e.g. %s)\n", skips_.size(),
                skips_.front().c_str());
  }
  std::printf("#\n");
  if (opt_.conformance) {
    std::printf(
        "conformance: %lld checks, %lld wrong  (%lld wrong elements, %lld out-of-bounds "
        "bytes, %zu unsupported combinations skipped, %d ranks)\n",
        static_cast<long long>(checks_), static_cast<long long>(failedChecks_),
        static_cast<long long>(wrong_), static_cast<long long>(oob_), skips_.size(), nranks_);
  }
  std::fflush(stdout);
}

bool Report::writeJson(const std::string& path, const std::vector<std::string>& rankLines) const {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  int version = 0;
  xcclGetVersion(&version);
  std::fprintf(f, "{\n  \"tool\": \"xccl-tests\",\n  \"libxccl_version\": %d,\n", version);
  std::fprintf(f, "  \"mode\": \"%s\",\n  \"nranks\": %d,\n",
               opt_.conformance ? "conformance" : "performance", nranks_);
  std::fprintf(
      f,
      "  \"params\": {\"nthreads\": %d, \"nprocs\": %d, \"minbytes\": %zu, \"maxbytes\": %zu, "
      "\"stepfactor\": %g, \"stepbytes\": %zu, \"additive_step\": %s, \"iters\": %d, "
      "\"warmup_iters\": %d, \"agg_iters\": %d, \"check\": %d, \"average\": %d, "
      "\"seed\": %llu, \"timeout_s\": %d},\n",
      opt_.nthreads, opt_.nprocs, opt_.minBytes, opt_.maxBytes, opt_.stepFactor, opt_.stepBytes,
      opt_.additiveStep ? "true" : "false", opt_.iters, opt_.warmup, opt_.aggIters, opt_.check,
      opt_.average, static_cast<unsigned long long>(opt_.seed), opt_.timeoutSec);
  std::fprintf(f, "  \"ranks\": [");
  for (size_t i = 0; i < rankLines.size(); ++i) {
    std::fprintf(f, "%s\"%s\"", i ? ", " : "", jsonEscape(rankLines[i]).c_str());
  }
  std::fprintf(f, "],\n  \"results\": [\n");
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    std::fprintf(
        f,
        "    {\"collective\": \"%s\", \"size_bytes\": %zu, \"count\": %zu, \"type\": \"%s\", "
        "\"redop\": \"%s\", \"root\": %d, \"out_of_place\": %s, \"in_place\": %s}%s\n",
        collInfo(r.coll).name, r.bytes, r.count, typeInfo(r.type).name, r.redop.c_str(), r.root,
        jsonPlace(r.place[0]).c_str(), jsonPlace(r.place[1]).c_str(),
        i + 1 < rows_.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"losses\": [");
  for (size_t i = 0; i < losses_.size(); ++i) {
    const Loss& l = losses_[i];
    std::string ranks;
    for (int r : l.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    std::fprintf(f,
                 "%s{\"ranks\": [%s], \"case\": %d, \"collective\": \"%s\", "
                 "\"size_bytes\": %zu, \"survivors\": %d, \"fail_ms\": %.3f, "
                 "\"shrink_ms\": %.3f}",
                 i ? ", " : "", ranks.c_str(), l.caseNo, l.coll.c_str(), l.bytes, l.survivors,
                 l.failMs, l.shrinkMs);
  }
  std::fprintf(f, "],\n  \"skipped\": [");
  for (size_t i = 0; i < skips_.size(); ++i) {
    std::fprintf(f, "%s\"%s\"", i ? ", " : "", jsonEscape(skips_[i]).c_str());
  }
  std::fprintf(f,
               "],\n  \"summary\": {\"checks\": %lld, \"failed_checks\": %lld, \"wrong\": %lld, "
               "\"out_of_bounds\": %lld, \"avg_busbw_gbs\": %.4f}\n}\n",
               static_cast<long long>(checks_), static_cast<long long>(failedChecks_),
               static_cast<long long>(wrong_), static_cast<long long>(oob_),
               bwCount_ ? bwSum_ / static_cast<double>(bwCount_) : 0.0);
  return std::fclose(f) == 0;
}

}  // namespace xt
