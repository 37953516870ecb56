// How a checked call reaches the queue: at once, on the caller (XCCL_STREAM_CALLER), or
// recorded in the open group until the outermost xcclGroupEnd; and the one validator every
// collective and point-to-point entry's CollArgs passes first.
#include <algorithm>
#include <utility>
#include <vector>

#include "api_edge.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/device/device.h"

namespace xccl {
namespace {

// ---- groups: per-thread list of (comm, args) until the outermost xcclGroupEnd ----
thread_local int tlsGroupDepth = 0;
struct GroupedOp {
  Comm* comm;
  CollArgs args;
  xcclStream_t stream;
};
thread_local std::vector<GroupedOp> tlsGroupOps;

// What the engine refuses (validateCollArgs: dtype, op, root or peer, counts, NULL buffers)
// and the rules of the API above it, which the engine does not know: premulsum is offered
// by allreduce alone, alltoall(v) is never in place, and a rank talks to itself only inside
// a group (alone it would wait for itself).
void validateCall(const Comm& comm, const CollArgs& a) {
  validateCollArgs(a, comm.rank(), comm.nranks());
  const char* coll = collName(a.type);
  XCCL_CHECK_ARG(comm.deviceSupports(a.dtype), coll, ": data type ", xcclTypeName(a.dtype),
                 " is not supported on device ", comm.deviceName());
  XCCL_CHECK_ARG(!isReduction(a.type) || a.op != xcclPremulSum || a.type == CollType::kAllReduce,
                 coll, ": premulsum is only offered by allreduce");
  if (a.type == CollType::kAllToAll || a.type == CollType::kAllToAllv) {
    size_t moved = a.count;
    for (size_t c : a.sendcounts) moved += c;
    for (size_t c : a.recvcounts) moved += c;
    XCCL_CHECK_ARG(a.sendbuf != a.recvbuf || moved == 0, coll, ": in-place is not supported");
  }
  if (isPointToPoint(a.type) && a.type != CollType::kRecvAny) {
    XCCL_CHECK_ARG(a.root != comm.rank() || tlsGroupDepth > 0, coll, ": rank ", a.root,
                   " sends to or receives from itself outside a group (it would wait "
                   "for itself); put the send and the receive in one xcclGroupStart/End");
  }
}

// Sends to and receives from oneself pair up in issue order within one group; their
// counts must match so the progress thread can copy each send into its receive.
void checkSelfP2P(const Comm& comm, const std::vector<CollArgs>& p2p) {
  std::vector<size_t> sends, recvs;
  for (const CollArgs& a : p2p) {
    if (a.root != comm.rank() || a.type == CollType::kRecvAny) continue;
    (a.type == CollType::kSend ? sends : recvs).push_back(a.count * dtypeSize(a.dtype));
  }
  XCCL_CHECK_ARG(sends.size() == recvs.size(), "rank ", comm.rank(), " posts ", sends.size(),
                 " send(s) to itself but ", recvs.size(), " receive(s) from itself");
  for (size_t i = 0; i < sends.size(); ++i) {
    XCCL_CHECK_ARG(sends[i] == recvs[i], "rank ", comm.rank(), ": send #", i, " to itself has ",
                   sends[i], " bytes but the matching receive has ", recvs[i]);
  }
}

// The list storage of this thread's last operation run on the caller, kept empty for its
// next one: a blocking small collective then allocates nothing (the list's malloc and free
// were a sixth of the instructions of a call on the caller, callgrind).
thread_local std::vector<CollArgs> tlsSpareList;

// An operation's list for one call, with the spare's storage when there is one.
std::vector<CollArgs>& listFor(OpEntry& op, bool p2p) {
  std::vector<CollArgs>& list = p2p ? op.p2p : op.colls;
  list.swap(tlsSpareList);
  return list;
}

// XCCL_STREAM_CALLER: run on this thread and return the operation's outcome as the
// call's (the sticky error names it); otherwise enqueue for the progress thread.
void enqueueOrRun(Comm& comm, OpEntry&& op) {
  if (op.stream != XCCL_STREAM_CALLER) {
    comm.enqueue(std::move(op));
    return;
  }
  const uint64_t id = comm.runOnCaller(op);
  std::vector<CollArgs>& used = op.colls.capacity() > 0 ? op.colls : op.p2p;
  used.clear();
  used.swap(tlsSpareList);
  const xcclResult_t r = comm.query(id);
  if (r != xcclSuccess) throw Error(toKind(r), comm.lastError());
}

}  // namespace

bool inOpenGroup() { return tlsGroupDepth > 0; }

void forgetGroupedOps(const Comm* comm) {
  tlsGroupOps.erase(std::remove_if(tlsGroupOps.begin(), tlsGroupOps.end(),
                                   [&](const GroupedOp& g) { return g.comm == comm; }),
                    tlsGroupOps.end());
}

void submit(Comm& comm, CollArgs args, xcclStream_t stream) {
  validateCall(comm, args);
  if (tlsGroupDepth > 0) {
    tlsGroupOps.push_back({&comm, std::move(args), stream});
    return;
  }
  OpEntry op;
  op.stream = stream;
  listFor(op, isPointToPoint(args.type)).push_back(std::move(args));
  enqueueOrRun(comm, std::move(op));
}

}  // namespace xccl

using namespace xccl;  // NOLINT: this file is the API edge

extern "C" {

xcclResult_t xcclGroupStart(void) {
  ++tlsGroupDepth;
  return xcclSuccess;
}

xcclResult_t xcclGroupDiscard(void) {
  return guarded("xcclGroupDiscard", [&] {
    XCCL_CHECK(tlsGroupDepth > 0, "xcclGroupDiscard without xcclGroupStart");
    tlsGroupDepth = 0;
    tlsGroupOps.clear();
  });
}

xcclResult_t xcclGroupEnd(void) {
  return guarded("xcclGroupEnd", [&] {
    XCCL_CHECK(tlsGroupDepth > 0, "xcclGroupEnd without xcclGroupStart");
    if (--tlsGroupDepth > 0) return;
    // One queue entry per communicator, in order of first appearance.
    // A group's operations on one communicator are one entry, ordered on one stream.
    std::vector<std::pair<Comm*, OpEntry>> perComm;
    std::vector<GroupedOp> ops = std::move(tlsGroupOps);
    tlsGroupOps.clear();
    for (auto& g : ops) {
      auto it = std::find_if(perComm.begin(), perComm.end(),
                             [&](const auto& e) { return e.first == g.comm; });
      if (it == perComm.end()) {
        it = perComm.insert(perComm.end(), {g.comm, OpEntry{}});
        it->second.stream = g.stream;
      }
      XCCL_CHECK_ARG(it->second.stream == g.stream, "rank ", g.comm->rank(),
                     ": the operations of a group on one communicator must use one stream");
      (isPointToPoint(g.args.type) ? it->second.p2p : it->second.colls)
          .push_back(std::move(g.args));
    }
    for (auto& [comm, op] : perComm) checkSelfP2P(*comm, op.p2p);
    // Running one communicator's part of a group to its end before the next one is posted
    // could wait forever on a peer that waits for the other part first.
    for (auto& [comm, op] : perComm) {
      XCCL_CHECK_ARG(op.stream != XCCL_STREAM_CALLER || perComm.size() == 1,
                     "XCCL_STREAM_CALLER in a group that spans ", perComm.size(),
                     " communicators (one only)");
    }
    for (auto& [comm, op] : perComm) enqueueOrRun(*comm, std::move(op));
  });
}

}  // extern "C"
