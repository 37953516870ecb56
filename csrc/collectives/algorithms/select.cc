// The selector: which registered algorithm runs a call (registry.cc holds the list and
// parses XCCL_ALGO; run_collective.cc calls selectAlgorithm).
//
// selectAlgorithm(args):
//   XCCL_ALGO = "<name>"                  every collective that has <name> uses it
//             = "allreduce=ring,broadcast=chain"   per collective (others: automatic)
//   A forced algorithm that declines the call is an InvalidUsage naming it. Otherwise the
//   tuning table below orders the candidates by message size and the first that accepts
//   the call runs:
//
//   collective      small (bytes <= knob)   large       knob (bytes of the whole buffer)
//   allreduce       slot (one host), direct ring (hierarchical)   XCCL_ALLREDUCE_DIRECT_MAX
//                   (twolevel)                          (slot: also XCCL_SLOT_MAX)
//                   one host, above the slot size: mapped first, when every rank's
//                   buffers can be mapped (xcclMemAlloc, xdev); the above otherwise
//   broadcast       direct                  chain       XCCL_BROADCAST_DIRECT_MAX
//   reduce          direct                  chain       XCCL_REDUCE_DIRECT_MAX
//   allgather       direct                  ring        XCCL_ALLGATHER_DIRECT_MAX (output)
//   reducescatter   direct                  ring        XCCL_REDUCESCATTER_DIRECT_MAX (input)
//   alltoall(v)     pairwise; gather, scatter: direct;
//   barrier: dissemination
//
//   Across hosts (topology/plan.h) allreduce prefers, when every host holds the same number
//   (>= 2) of ranks, "hierarchical" from XCCL_HIERARCHICAL_MIN bytes on (the network carries
//   2(H-1)/H of the buffer per host instead of 2(n-1)/n), and "twolevel" for small ones once there
//   are XCCL_TWOLEVEL_MIN_HOSTS hosts or more (a leader per host: 2 network messages per host
//   instead of n-1 per rank). Each choice is explained once per communicator at
//   XCCL_DEBUG=INFO (subsystem COLL).
#include <string>
#include <vector>

#include "algorithm.h"
#include "common/log.h"
#include "common/param.h"
#include "schedule.h"

namespace xccl {

XCCL_PARAM_STR(Algo, "ALGO", "")
XCCL_PARAM(AllreduceDirectMax, "ALLREDUCE_DIRECT_MAX", 64 << 10, 0, kKnobMax)
XCCL_PARAM(BroadcastDirectMax, "BROADCAST_DIRECT_MAX", 64 << 10, 0, kKnobMax)
XCCL_PARAM(ReduceDirectMax, "REDUCE_DIRECT_MAX", 64 << 10, 0, kKnobMax)
XCCL_PARAM(AllgatherDirectMax, "ALLGATHER_DIRECT_MAX", 64 << 10, 0, kKnobMax)
XCCL_PARAM(ReducescatterDirectMax, "REDUCESCATTER_DIRECT_MAX", 256 << 10, 0, kKnobMax)
XCCL_PARAM(TwolevelMinHosts, "TWOLEVEL_MIN_HOSTS", 3, 1, kKnobMax)
// From this many ranks on, small allreduces (up to ALLREDUCE_DIRECT_MAX) prefer
// "recdoubling" (log2 n rounds) to "direct" (n-1 messages per rank; BENCHMARKS.md section 14).
XCCL_PARAM(RecdoublingMinRanks, "RECDOUBLING_MIN_RANKS", 8, 2, kKnobMax)
// From this many ranks on, allreduces above ALLREDUCE_DIRECT_MAX and up to RABENSEIFNER_MAX
// prefer "rabenseifner" (2 log2 n rounds) to the ring (2(n-1) rounds).
XCCL_PARAM(RabenseifnerMinRanks, "RABENSEIFNER_MIN_RANKS", 32, 2, kKnobMax)
// From this many ranks on, reproducible allreduces above the direct size run "foldchain" (the
// rank-order fold as a pipeline between neighbours) before "ordered" (every owner receives
// from every rank): 8 processes at 512 KiB, 1.0 against 4.6 ms; 64 at 4 MiB, 110 against
// 911 ms. Through torch, in place, against the default in the same processes: 3 and 4 ranks
// 0.93-1.07 x at 1-64 MiB with the chain, 0.78-1.50 x with "ordered" (2 cores; BENCHMARKS.md
// section 18). Two ranks keep "ordered": the chain would leave every reduction to rank 1.
XCCL_PARAM(FoldchainMinRanks, "FOLDCHAIN_MIN_RANKS", 3, 2, kKnobMax)
XCCL_PARAM(RabenseifnerMax, "RABENSEIFNER_MAX", 4 << 20, 0, kKnobMax)
// From this size on, allreduce across hosts prefers "hierarchical" (its three phases wait
// for each other: below ~2 MiB on a fast link the flat ring's single pipeline wins;
// BENCHMARKS.md section 10).
XCCL_PARAM(HierarchicalMin, "HIERARCHICAL_MIN", 2 << 20, 0, kKnobMax)
// From this many hosts on, hierarchical's allreduce across hosts (its step 2) is Rabenseifner's
// 2 log2 H rounds instead of a ring's 2(H-1) (docs/SIMULATOR.md: the ring column's network
// latencies dominate at thousands of ranks). Not from 4: there, on 1 Gbit/s namespace hosts,
// the log schedule was 1.3-1.6 x faster at 8 B but 7 % slower at 4 MiB, the sizes hierarchical
// is chosen for (its rounds wait for each other where the ring's slices overlap); 16 is where
// the saved latencies (22 rounds) outweigh that on 100 Gbit/s links, by the cost model.
XCCL_PARAM(HierarchicalLogMinHosts, "HIERARCHICAL_LOG_MIN_HOSTS", 16, 2, kKnobMax)
// Knobs of the schedules (Tuning, exchange.h).
XCCL_PARAM(RingSlice, "RING_SLICE", 512 << 10, kKnobMin, kKnobMax)  // ring message size
XCCL_PARAM(ChainChunk, "CHAIN_CHUNK", 256 << 10, kKnobMin,
           kKnobMax)  // broadcast/reduce chain chunk
XCCL_PARAM(DirectTempMax, "DIRECT_TEMP_MAX", 256 << 20, 0,
           kKnobMax)  // cap on a direct fold's temporary
// 1: reductions give the left fold of the inputs in rank order, bit for bit, whatever the
// size, algorithm or placement (only Algorithm::ordered ones run them).
XCCL_PARAM(Reproducible, "REPRODUCIBLE", 0, 0, 1)

namespace {

const std::string& forcedName(CollType type, const Exchange& ex) {
  return ex.tuning().forced[static_cast<size_t>(type)];
}

// Candidate names for `args` in order of preference (the tuning table), before "mapped".
std::vector<const char*> orderBySize(const CollArgs& args, const Exchange& ex) {
  const Tuning& t = ex.tuning();
  const size_t bytes = args.count * dtypeSize(args.dtype);
  const size_t all = bytes * static_cast<size_t>(ex.nranks());
  auto bySize = [](size_t size, int64_t max, const char* small, const char* large) {
    return size <= static_cast<size_t>(max) ? std::vector<const char*>{small, large}
                                            : std::vector<const char*>{large, small};
  };
  if (t.reproducible && isReduction(args.type)) {
    // Only the rank-order folds: "direct" where its temporary is small (one step), then
    // "ordered" (a ring's bytes, in rounds that fit the temporary), or for many ranks
    // "foldchain" (a pipeline between neighbours in rank order).
    const int64_t small = args.type == CollType::kAllReduce ? t.allreduceDirectMax
                          : args.type == CollType::kReduce  ? t.reduceDirectMax
                                                            : t.reducescatterDirectMax;
    const size_t size =
        args.type == CollType::kAllReduce || args.type == CollType::kReduce ? bytes : all;
    if (args.type == CollType::kReduceScatterv) return {"ordered"};
    if (args.type == CollType::kAllReduce && bytes <= t.slotMax) {
      return {"slot", "direct", "ordered"};
    }
    if (args.type == CollType::kAllReduce && size > static_cast<size_t>(small) &&
        ex.nranks() >= t.foldchainMinRanks) {
      return {"foldchain", "ordered", "direct"};  // foldchain declines floating max and min
    }
    return bySize(size, small, "direct", "ordered");
  }
  switch (args.type) {
    case CollType::kAllReduce: {
      const auto& hosts = ex.hosts();
      const bool multiHost = hosts.size() > 1;
      // One host, host memory: the slots (declines otherwise).
      if (bytes <= t.slotMax && !multiHost && bytes <= static_cast<size_t>(t.allreduceDirectMax)) {
        return {"slot", "recdoubling", "direct", "ring"};
      }
      if (bytes <= static_cast<size_t>(t.allreduceDirectMax)) {
        if (ex.nranks() >= t.recdoublingMinRanks) return {"recdoubling", "direct", "ring"};
        if (multiHost && static_cast<int64_t>(hosts.size()) >= t.twolevelMinHosts) {
          return {"twolevel", "direct", "ring"};
        }
        return {"direct", "ring"};
      }
      if (ex.nranks() >= t.rabenseifnerMinRanks &&
          bytes <= static_cast<size_t>(t.rabenseifnerMax)) {
        return {"rabenseifner", "ring"};
      }
      if (multiHost && bytes >= static_cast<size_t>(t.hierarchicalMin)) {
        return {"hierarchical", "ring"};
      }
      return {"ring", "direct"};
    }
    case CollType::kBroadcast:
      return bySize(bytes, t.broadcastDirectMax, "direct", "chain");
    case CollType::kReduce:
      return bySize(bytes, t.reduceDirectMax, "direct", "chain");
    case CollType::kAllGather:
      return bySize(all, t.allgatherDirectMax, "direct", "ring");
    case CollType::kReduceScatter:
      return bySize(all, t.reducescatterDirectMax, "direct", "ring");
    default:
      return {};  // the first registered algorithm that accepts the call
  }
}

// Candidate names for `args` in order of preference. An allreduce on one host above the slots'
// size tries "mapped" first: the ranks learn in its meeting whether every rank's buffers can
// be mapped, and otherwise go on down the list (selectAlgorithmAfter). It wins from there on
// (2 ranks through torch, peer_memory tensors: 16 KiB 8.1 against 12.6 us, 256 KiB 14.6
// against 142, 64 MiB 5.4 against 8.7 ms; BENCHMARKS.md section 25), unlike a peer read of
// a single message, which starts at XCCL_PEER_READ_MIN. Where the slots reach further (64 KiB
// when ranks outnumber cores), "mapped" goes before them from kMappedBeforeSlots: 4 ranks on
// 2 cores, peer_memory tensors, mapped against the slots 0.87 x at 32 KiB and 0.74 x at
// 64 KiB, 1.05 x at 16 KiB (BENCHMARKS.md section 25).
constexpr size_t kMappedBeforeSlots = 16 << 10;

std::vector<const char*> tuningOrder(const CollArgs& args, const Exchange& ex) {
  std::vector<const char*> order = orderBySize(args, ex);
  const size_t bytes = args.count * dtypeSize(args.dtype);
  const Tuning& t = ex.tuning();
  const bool slotSized = bytes <= t.slotMax && bytes <= static_cast<size_t>(t.allreduceDirectMax);
  if (args.type == CollType::kAllReduce && ex.hosts().size() == 1 && ex.readsInPlace() &&
      (!slotSized || bytes > kMappedBeforeSlots) && bytes > 0) {
    order.insert(order.begin(), "mapped");
  }
  return order;
}

// Says once per communicator and (collective, algorithm) why the selector took it: the
// size class, the hosts, and the preferred candidates that declined.
void explainChoice(const CollArgs& args, Exchange& ex, const Algorithm& chosen,
                   const std::vector<const char*>& order, size_t index) {
  if (!logEnabled(LogLevel::kInfo, COLL)) return;
  if (!ex.firstTime(strCat(collName(args.type), "/", chosen.name))) return;
  auto join = [](auto first, auto last, const char* sep, auto&& text) {
    std::string s;
    for (auto it = first; it != last; ++it) s += strCat(it == first ? "" : sep, text(*it));
    return s;
  };
  const auto& hosts = ex.hosts();
  const std::string perHost =
      join(hosts.begin(), hosts.end(), "/", [](const std::vector<int>& h) { return h.size(); });
  const auto name = [](const char* n) { return n; };
  const std::string declined = join(order.begin(), order.begin() + index, ", ", name);
  XCCL_INFO(COLL, collName(args.type), " of ", args.count * dtypeSize(args.dtype), " bytes on ",
            hosts.size(), " host(s) of ", perHost, " rank(s): algorithm ", chosen.name,
            " (candidates by size and topology: ", join(order.begin(), order.end(), ", ", name),
            declined.empty() ? std::string() : strCat("; declined: ", declined),
            "; XCCL_ALGO overrides, docs/ALGORITHMS.md)");
}

}  // namespace

std::string describeSize(const CollArgs& args, const Exchange& ex) {
  return strCat(args.count, " x ", xcclTypeName(args.dtype), " on ", ex.nranks(), " ranks");
}

Tuning readTuning() {
  Tuning t;
  t.algoSpec = xcclParamAlgo();
  t.forced = parseForced(t.algoSpec);
  t.allreduceDirectMax = xcclParamAllreduceDirectMax();
  t.slotMax = algo::slotMaxBytes(1, 1);  // a core per rank; the communicator sets its host's
  t.broadcastDirectMax = xcclParamBroadcastDirectMax();
  t.reduceDirectMax = xcclParamReduceDirectMax();
  t.allgatherDirectMax = xcclParamAllgatherDirectMax();
  t.reducescatterDirectMax = xcclParamReducescatterDirectMax();
  t.twolevelMinHosts = xcclParamTwolevelMinHosts();
  t.recdoublingMinRanks = xcclParamRecdoublingMinRanks();
  t.rabenseifnerMinRanks = xcclParamRabenseifnerMinRanks();
  t.foldchainMinRanks = xcclParamFoldchainMinRanks();
  t.rabenseifnerMax = xcclParamRabenseifnerMax();
  t.hierarchicalMin = xcclParamHierarchicalMin();
  t.hierarchicalLogMinHosts = xcclParamHierarchicalLogMinHosts();
  t.directTempMax = xcclParamDirectTempMax();
  t.reproducible = xcclParamReproducible() != 0;
  t.ringSlice = algo::pieceBytesKnob(xcclParamRingSlice());
  t.chainChunk = algo::pieceBytesKnob(xcclParamChainChunk());
  checkReproducible(t);
  return t;
}

void checkReproducible(const Tuning& t) {
  if (!t.reproducible) return;
  for (CollType type : {CollType::kAllReduce, CollType::kReduce, CollType::kReduceScatter,
                        CollType::kReduceScatterv}) {
    const std::string& name = t.forced[static_cast<size_t>(type)];
    const Algorithm* a = name.empty() ? nullptr : findAlgorithm(type, name);
    if (a != nullptr && !a->ordered) {
      throw InvalidUsage(strCat("XCCL_ALGO='", t.algoSpec, "' forces ", collName(type),
                                " algorithm '", name,
                                "', which does not fold the inputs in rank order, and "
                                "XCCL_REPRODUCIBLE=1 (or config.reproducible) asks for that "
                                "fold: force 'ordered' or 'direct', or drop one of the two"));
    }
  }
}

namespace {

// selectAlgorithm, passing over the algorithm named `skip` (nullptr: none).
const Algorithm& selectSkipping(const CollArgs& args, Exchange& ex, const char* skip) {
  auto skipped = [&](const Algorithm& a) { return skip != nullptr && std::string(skip) == a.name; };
  const std::string& forced = forcedName(args.type, ex);
  if (!forced.empty() && skip == nullptr) {
    const Algorithm* a = findAlgorithm(args.type, forced);
    // (a forced algorithm that cannot fold in rank order under XCCL_REPRODUCIBLE was refused
    // when the communicator was made: checkReproducible)
    if (!a->supports(args, ex)) {
      throw InvalidUsage(strCat("XCCL_ALGO forces ", collName(args.type), " algorithm '", forced,
                                "', which declines this call (", describeSize(args, ex),
                                "); unset XCCL_ALGO or pick another algorithm"));
    }
    return *a;
  }
  const std::vector<const char*> order = tuningOrder(args, ex);
  for (size_t i = 0; i < order.size(); ++i) {
    const Algorithm* a = findAlgorithm(args.type, order[i]);
    if (a == nullptr || skipped(*a) || !a->supports(args, ex)) continue;
    explainChoice(args, ex, *a, order, i);
    return *a;
  }
  const bool ordered = ex.tuning().reproducible && isReduction(args.type);
  for (const Algorithm& a : allAlgorithms()) {
    if (a.type == args.type && (a.ordered || !ordered) && !skipped(a) && a.supports(args, ex)) {
      return a;
    }
  }
  throw InvalidUsage(
      strCat("no ", collName(args.type), " algorithm accepts ", describeSize(args, ex)));
}

}  // namespace

const Algorithm& selectAlgorithm(const CollArgs& args, Exchange& ex) {
  return selectSkipping(args, ex, nullptr);
}

const Algorithm& selectAlgorithmAfter(const CollArgs& args, Exchange& ex, const char* declined) {
  return selectSkipping(args, ex, declined);
}

}  // namespace xccl
