// The algorithm registry and XCCL_ALGO: every collective's algorithms in one list (the
// per-file lists schedule.h declares), and the spec that forces some of them, parsed and
// checked against that list once per communicator (readTuning).
#include <algorithm>
#include <cctype>
#include <string>

#include "algorithm.h"
#include "common/error.h"
#include "schedule.h"

namespace xccl {
namespace {

// "Reduce_Scatter" -> "reducescatter": the key spelling of collName().
std::string normalize(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '-' || std::isspace(static_cast<unsigned char>(c))) continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

const CollType kAllTypes[] = {
    CollType::kAllReduce,     CollType::kBroadcast,  CollType::kReduce,        CollType::kAllGather,
    CollType::kReduceScatter, CollType::kAllToAll,   CollType::kAllToAllv,     CollType::kGather,
    CollType::kScatter,       CollType::kSend,       CollType::kRecv,          CollType::kRecvAny,
    CollType::kBarrier,       CollType::kAllGatherv, CollType::kReduceScatterv};

}  // namespace

const std::vector<Algorithm>& allAlgorithms() {
  static const std::vector<Algorithm> all = [] {
    std::vector<Algorithm> v;
    for (auto list :
         {algo::allreduceAlgorithms, algo::broadcastAlgorithms, algo::reduceAlgorithms,
          algo::allgatherAlgorithms, algo::reduceScatterAlgorithms, algo::alltoallAlgorithms,
          algo::gatherScatterAlgorithms, algo::barrierAlgorithms, algo::orderedAlgorithms}) {
      for (const Algorithm& a : list()) v.push_back(a);
    }
    return v;
  }();
  return all;
}

const Algorithm* findAlgorithm(CollType type, const std::string& name) {
  for (const Algorithm& a : allAlgorithms()) {
    if (a.type == type && name == a.name) return &a;
  }
  return nullptr;
}

std::vector<std::string> parseForced(const std::string& spec) {
  std::vector<std::string> forced(static_cast<size_t>(kLastCollType) + 1);
  if (spec.empty()) return forced;
  std::string global;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string tok =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    size_t eq = tok.find('=');
    if (eq == std::string::npos) {
      std::string name = normalize(tok);
      if (name.empty()) continue;
      XCCL_CHECK(global.empty() || global == name, "XCCL_ALGO='", spec,
                 "' names two algorithms for every collective: ", global, " and ", name);
      bool known = std::any_of(allAlgorithms().begin(), allAlgorithms().end(),
                               [&](const Algorithm& a) { return name == a.name; });
      XCCL_CHECK(known, "XCCL_ALGO='", spec, "': no collective has an algorithm named '", name,
                 "'");
      global = name;
      continue;
    }
    std::string coll = normalize(tok.substr(0, eq)), name = normalize(tok.substr(eq + 1));
    const CollType* type = std::find_if(std::begin(kAllTypes), std::end(kAllTypes),
                                        [&](CollType t) { return coll == collName(t); });
    XCCL_CHECK(type != std::end(kAllTypes), "XCCL_ALGO='", spec, "': unknown collective '", coll,
               "'");
    XCCL_CHECK(findAlgorithm(*type, name) != nullptr, "XCCL_ALGO='", spec, "': ", coll,
               " has no algorithm named '", name, "'");
    forced[static_cast<size_t>(*type)] = name;
  }
  for (CollType t : kAllTypes) {
    std::string& mine = forced[static_cast<size_t>(t)];
    if (mine.empty() && !global.empty() && findAlgorithm(t, global) != nullptr) mine = global;
  }
  return forced;
}

}  // namespace xccl
