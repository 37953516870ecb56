// The algorithm registry, the selector and runCollective().
//
// runCollective(args):
//   1. validate the arguments (InvalidArgument naming the collective and the bad value);
//   2. nothing to move (count 0, not a handshake) -> return; one rank -> local device copy;
//   3. PremulSum -> scale sendbuf by the scalar into a temporary, then Sum;
//      Avg -> Sum, then divide the elements this rank owns as output by nranks;
//   4. selectAlgorithm(args) and run it.
//
// selectAlgorithm(args):
//   XCCL_ALGO = "<name>"                  every collective that has <name> uses it
//             = "allreduce=ring,broadcast=chain"   per collective (others: automatic)
//   A forced algorithm that declines the call is an InvalidUsage naming it. Otherwise the
//   tuning table below orders the candidates by message size and the first that accepts
//   the call runs:
//
//   collective      small (bytes <= knob)   large       knob (bytes of the whole buffer)
//   allreduce       direct (twolevel)       ring (hierarchical)   XCCL_ALLREDUCE_DIRECT_MAX
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
#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include "common/log.h"
#include "common/param.h"
#include "schedule.h"

namespace xccl {

XCCL_PARAM_STR(Algo, "ALGO", "")
XCCL_PARAM(AllreduceDirectMax, "ALLREDUCE_DIRECT_MAX", 64 << 10)
XCCL_PARAM(BroadcastDirectMax, "BROADCAST_DIRECT_MAX", 64 << 10)
XCCL_PARAM(ReduceDirectMax, "REDUCE_DIRECT_MAX", 64 << 10)
XCCL_PARAM(AllgatherDirectMax, "ALLGATHER_DIRECT_MAX", 64 << 10)
XCCL_PARAM(ReducescatterDirectMax, "REDUCESCATTER_DIRECT_MAX", 256 << 10)
XCCL_PARAM(TwolevelMinHosts, "TWOLEVEL_MIN_HOSTS", 3)
// From this size on, allreduce across hosts prefers "hierarchical" (its three phases wait
// for each other: below ~2 MiB on a fast link the flat ring's single pipeline wins;
// BENCHMARKS.md section 10).
XCCL_PARAM(HierarchicalMin, "HIERARCHICAL_MIN", 2 << 20)
// Knobs of the schedules (Tuning, exchange.h).
XCCL_PARAM(RingSlice, "RING_SLICE", 512 << 10)           // ring message size
XCCL_PARAM(ChainChunk, "CHAIN_CHUNK", 256 << 10)         // broadcast/reduce chain chunk
XCCL_PARAM(DirectTempMax, "DIRECT_TEMP_MAX", 256 << 20)  // cap on a direct fold's temporary

namespace {

using algo::at;

// "Reduce_Scatter" -> "reducescatter": the key spelling of collName().
std::string normalize(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '-' || std::isspace(static_cast<unsigned char>(c))) continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

const CollType kAllTypes[] = {CollType::kAllReduce, CollType::kBroadcast,     CollType::kReduce,
                              CollType::kAllGather, CollType::kReduceScatter, CollType::kAllToAll,
                              CollType::kAllToAllv, CollType::kGather,        CollType::kScatter,
                              CollType::kSend,      CollType::kRecv,          CollType::kRecvAny,
                              CollType::kBarrier};

const Algorithm* findAlgorithm(CollType type, const std::string& name) {
  for (const Algorithm& a : allAlgorithms()) {
    if (a.type == type && name == a.name) return &a;
  }
  return nullptr;
}

// XCCL_ALGO parsed and checked: the algorithm it forces for each collective ("" for
// automatic choice), indexed by CollType.
std::vector<std::string> parseForced(const std::string& spec) {
  std::vector<std::string> forced(static_cast<size_t>(CollType::kBarrier) + 1);
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

const std::string& forcedName(CollType type, const Exchange& ex) {
  return ex.tuning().forced[static_cast<size_t>(type)];
}

// Candidate names for `args` in order of preference (the tuning table).
std::vector<const char*> tuningOrder(const CollArgs& args, const Exchange& ex) {
  const Tuning& t = ex.tuning();
  const size_t bytes = args.count * dtypeSize(args.dtype);
  const size_t all = bytes * static_cast<size_t>(ex.nranks());
  auto bySize = [](size_t size, int64_t max, const char* small, const char* large) {
    return size <= static_cast<size_t>(max) ? std::vector<const char*>{small, large}
                                            : std::vector<const char*>{large, small};
  };
  switch (args.type) {
    case CollType::kAllReduce: {
      const auto& hosts = ex.hosts();
      const bool multiHost = hosts.size() > 1;
      if (bytes <= static_cast<size_t>(t.allreduceDirectMax)) {
        if (multiHost && static_cast<int64_t>(hosts.size()) >= t.twolevelMinHosts) {
          return {"twolevel", "direct", "ring"};
        }
        return {"direct", "ring"};
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

std::string describe(const CollArgs& args, const Exchange& ex) {
  return strCat(args.count, " x ", xcclTypeName(args.dtype), " on ", ex.nranks(), " ranks");
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

// ---- validation ----

}  // namespace

void validateCollArgs(const CollArgs& args, int rank, int n) {
  const char* coll = collName(args.type);
  XCCL_CHECK_ARG(args.dtype >= 0 && args.dtype < xcclNumTypes, coll, ": invalid datatype ",
                 static_cast<int>(args.dtype));
  if (isReduction(args.type)) {
    XCCL_CHECK_ARG(args.op >= 0 && args.op < xcclNumOps, coll, ": invalid reduction op ",
                   static_cast<int>(args.op));
    XCCL_CHECK_ARG(opSupported(args.dtype, args.op), coll, ": op ", xcclOpName(args.op),
                   " is not supported for datatype ", xcclTypeName(args.dtype));
  }
  if (hasRoot(args.type)) {
    XCCL_CHECK_ARG(args.root >= 0 && args.root < n, coll, ": root ", args.root,
                   " is out of range for ", n, " ranks");
  }
  if (args.type == CollType::kSend || args.type == CollType::kRecv) {
    XCCL_CHECK_ARG(args.root >= 0 && args.root < n, coll, ": peer ", args.root,
                   " is out of range for ", n, " ranks");
  }
  if (args.type == CollType::kRecvAny) {
    XCCL_CHECK_ARG(n > 1, coll, ": there is no other rank to receive from (1 rank)");
  }
  const size_t elemSize = dtypeSize(args.dtype);
  XCCL_CHECK_ARG(args.count <= SIZE_MAX / elemSize / static_cast<size_t>(n), coll, ": count ",
                 args.count, " overflows the buffer size");
  if (args.type == CollType::kAllToAllv) {
    const size_t nn = static_cast<size_t>(n);
    XCCL_CHECK_ARG(args.sendcounts.size() == nn && args.sdispls.size() == nn &&
                       args.recvcounts.size() == nn && args.rdispls.size() == nn,
                   coll, ": sendcounts, sdispls, recvcounts and rdispls need ", n,
                   " entries each, got ", args.sendcounts.size(), ", ", args.sdispls.size(), ", ",
                   args.recvcounts.size(), ", ", args.rdispls.size());
    size_t sendTotal = 0, recvTotal = 0;
    for (int j = 0; j < n; ++j) sendTotal += args.sendcounts[j];
    for (int j = 0; j < n; ++j) recvTotal += args.recvcounts[j];
    XCCL_CHECK_ARG(args.sendcounts[rank] == args.recvcounts[rank], coll, ": rank ", rank, " sends ",
                   args.sendcounts[rank], " elements to itself but expects to receive ",
                   args.recvcounts[rank]);
    XCCL_CHECK_ARG(sendTotal == 0 || args.sendbuf != nullptr, coll, ": sendbuff is NULL");
    XCCL_CHECK_ARG(recvTotal == 0 || args.recvbuf != nullptr, coll, ": recvbuff is NULL");
    return;
  }
  if (args.count == 0) return;
  const bool root = args.root == rank;
  bool needSend = true, needRecv = true;
  switch (args.type) {
    case CollType::kBroadcast:
    case CollType::kScatter:
      needSend = root;
      break;
    case CollType::kReduce:
    case CollType::kGather:
      needRecv = root;
      break;
    case CollType::kSend:
      needRecv = false;
      break;
    case CollType::kRecv:
    case CollType::kRecvAny:
      needSend = false;
      break;
    case CollType::kBarrier:
      needSend = needRecv = false;
      break;
    default:
      break;
  }
  XCCL_CHECK_ARG(!needSend || args.sendbuf != nullptr, coll, ": sendbuff is NULL with count ",
                 args.count);
  XCCL_CHECK_ARG(!needRecv || args.recvbuf != nullptr, coll, ": recvbuff is NULL with count ",
                 args.count);
}

namespace {

// ---- one rank: every collective is a local copy ----

void runLocal(Exchange& ex, const CollArgs& args) {
  Device& device = ex.device();
  const size_t elemSize = dtypeSize(args.dtype);
  switch (args.type) {
    case CollType::kBarrier:
      return;
    case CollType::kAllToAllv:
      if (args.sendbuf == args.recvbuf && args.sdispls[0] == args.rdispls[0]) return;
      device.copy(at(args.recvbuf, args.rdispls[0] * elemSize),
                  at(args.sendbuf, args.sdispls[0] * elemSize), args.sendcounts[0] * elemSize,
                  CopyKind::kDeviceToDevice);
      return;
    default:
      break;
  }
  if (isReduction(args.type) && args.op == xcclPremulSum) {
    device.scale(args.recvbuf, args.sendbuf, args.count, args.dtype, args.scalar);
    return;
  }
  // Avg divides by 1: a copy like every other op (nothing at all in-place).
  if (args.recvbuf != args.sendbuf) {
    device.copy(args.recvbuf, args.sendbuf, args.count * elemSize, CopyKind::kDeviceToDevice);
  }
}

// Elements this rank owns as output of a reduction (Avg divides them by nranks).
size_t ownedOutput(const CollArgs& args, int rank) {
  if (args.type == CollType::kReduce && rank != args.root) return 0;
  return args.count;
}

}  // namespace

const std::vector<Algorithm>& allAlgorithms() {
  static const std::vector<Algorithm> all = [] {
    std::vector<Algorithm> v;
    for (auto list :
         {algo::allreduceAlgorithms, algo::broadcastAlgorithms, algo::reduceAlgorithms,
          algo::allgatherAlgorithms, algo::reduceScatterAlgorithms, algo::alltoallAlgorithms,
          algo::gatherScatterAlgorithms, algo::barrierAlgorithms}) {
      for (const Algorithm& a : list()) v.push_back(a);
    }
    return v;
  }();
  return all;
}

Tuning readTuning() {
  Tuning t;
  t.algoSpec = xcclParamAlgo();
  t.forced = parseForced(t.algoSpec);
  t.allreduceDirectMax = xcclParamAllreduceDirectMax();
  t.broadcastDirectMax = xcclParamBroadcastDirectMax();
  t.reduceDirectMax = xcclParamReduceDirectMax();
  t.allgatherDirectMax = xcclParamAllgatherDirectMax();
  t.reducescatterDirectMax = xcclParamReducescatterDirectMax();
  t.twolevelMinHosts = xcclParamTwolevelMinHosts();
  t.hierarchicalMin = xcclParamHierarchicalMin();
  t.directTempMax = xcclParamDirectTempMax();
  t.ringSlice = algo::pieceBytesKnob(xcclParamRingSlice());
  t.chainChunk = algo::pieceBytesKnob(xcclParamChainChunk());
  return t;
}

const Algorithm& selectAlgorithm(const CollArgs& args, Exchange& ex) {
  const std::string& forced = forcedName(args.type, ex);
  if (!forced.empty()) {
    const Algorithm* a = findAlgorithm(args.type, forced);
    if (!a->supports(args, ex)) {
      throw InvalidUsage(strCat("XCCL_ALGO forces ", collName(args.type), " algorithm '", forced,
                                "', which declines this call (", describe(args, ex),
                                "); unset XCCL_ALGO or pick another algorithm"));
    }
    return *a;
  }
  const std::vector<const char*> order = tuningOrder(args, ex);
  for (size_t i = 0; i < order.size(); ++i) {
    const Algorithm* a = findAlgorithm(args.type, order[i]);
    if (a == nullptr || !a->supports(args, ex)) continue;
    explainChoice(args, ex, *a, order, i);
    return *a;
  }
  for (const Algorithm& a : allAlgorithms()) {
    if (a.type == args.type && a.supports(args, ex)) return a;
  }
  throw InvalidUsage(strCat("no ", collName(args.type), " algorithm accepts ", describe(args, ex)));
}

void runCollective(Exchange& ex, const CollArgs& args) {
  validateCollArgs(args, ex.rank(), ex.nranks());
  const bool handshake = isPointToPoint(args.type) || args.type == CollType::kBarrier ||
                         args.type == CollType::kAllToAllv;
  // Every rank compares its call with its ring predecessor's, even when it has nothing to
  // move, so ranks that disagree fail instead of returning (Exchange::postCheck); schedules
  // that receive from the predecessor anyway compare in their own frames.
  if (args.count == 0 && !handshake) {  // nothing to move on any rank
    ex.postCheck();
    ex.wait();
    return;
  }
  if (ex.nranks() == 1) {
    runLocal(ex, args);
    return;
  }
  CollArgs run = args;
  const bool reduction = isReduction(args.type);
  std::unique_ptr<algo::DeviceBuffer> scaled;
  if (reduction && args.op == xcclPremulSum) {
    // Scale my whole input (reducescatter: all nranks blocks) and sum the scaled copies.
    size_t inputCount = args.count * (args.type == CollType::kReduceScatter ? ex.nranks() : 1);
    scaled = std::make_unique<algo::DeviceBuffer>(ex, inputCount * dtypeSize(args.dtype));
    ex.device().scale(scaled->get(), args.sendbuf, inputCount, args.dtype, args.scalar);
    run.sendbuf = scaled->get();
    run.op = xcclSum;
  }
  if (reduction && args.op == xcclAvg) run.op = xcclSum;
  const Algorithm& algorithm = selectAlgorithm(run, ex);
  XCCL_TRACE(COLL, collName(args.type), " ", describe(args, ex), " op ",
             reduction ? xcclOpName(args.op) : "-", " root ", args.root, " via ", algorithm.name);
  if (!algorithm.hearsRingPrev || handshake) ex.postCheck();
  algorithm.run(ex, run);
  ex.wait();  // the check frames, when the schedule posted nothing after them
  if (reduction && args.op == xcclAvg) {
    size_t owned = ownedOutput(args, ex.rank());
    if (owned > 0) ex.device().divide(args.recvbuf, owned, args.dtype, ex.nranks());
  }
}

}  // namespace xccl
