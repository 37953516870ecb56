// Collective descriptors, issue and host-side verification (see colls.h).
#include "colls.h"

#include <cstdio>

namespace xt {
namespace {

const CollInfo kColls[] = {
    {Coll::kAllReduce, "all_reduce", true, false},
    {Coll::kAllGather, "all_gather", false, false},
    {Coll::kReduceScatter, "reduce_scatter", true, false},
    {Coll::kBroadcast, "broadcast", false, true},
    {Coll::kReduce, "reduce", true, true},
    {Coll::kAllToAll, "alltoall", false, false},
    {Coll::kSendRecv, "sendrecv", false, false},
    {Coll::kGather, "gather", false, true},
    {Coll::kScatter, "scatter", false, true},
};

std::string squash(std::string s) {  // "all_reduce_perf" -> "allreduce"
  const std::string perf = "_perf";
  if (s.size() > perf.size() && s.compare(s.size() - perf.size(), perf.size(), perf) == 0) {
    s.resize(s.size() - perf.size());
  }
  std::string out;
  for (char ch : s) {
    if (ch != '_' && ch != '-') out += ch;
  }
  return out;
}

std::string describe(xcclDataType_t t, size_t idx, const Value& got, const Expected& e) {
  char buf[200];
  if (typeInfo(t).kind == Kind::kFloat) {
    std::snprintf(buf, sizeof buf, "element %zu: got %.9g, expected %.9g (tolerance %.3g)", idx,
                  got.f, e.v.f, e.tol);
  } else {
    std::snprintf(buf, sizeof buf, "element %zu: got %lld, expected %lld", idx,
                  static_cast<long long>(got.i), static_cast<long long>(e.v.i));
  }
  return buf;
}

}  // namespace

const CollInfo& collInfo(Coll c) { return kColls[static_cast<int>(c)]; }

const std::vector<Coll>& allColls() {
  static const std::vector<Coll> all = {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter,
                                        Coll::kBroadcast, Coll::kReduce,    Coll::kAllToAll,
                                        Coll::kSendRecv,  Coll::kGather,    Coll::kScatter};
  return all;
}

bool parseColl(const std::string& s, Coll* c) {
  std::string want = squash(s);
  for (const auto& info : kColls) {
    if (squash(info.name) == want) {
      *c = info.coll;
      return true;
    }
  }
  return false;
}

Layout layoutFromCount(Coll c, size_t count, size_t es, int nranks, int rank) {
  Layout l;
  auto n = static_cast<size_t>(nranks);
  auto r = static_cast<size_t>(rank);
  l.count = count;
  switch (c) {
    case Coll::kAllReduce:
    case Coll::kBroadcast:
    case Coll::kReduce:
    case Coll::kSendRecv:
      l.sendElems = l.recvElems = l.inElems = count;
      break;
    case Coll::kAllGather:
    case Coll::kGather:
      l.sendElems = count;
      l.recvElems = l.inElems = n * count;
      l.inSendOff = r * count;
      break;
    case Coll::kReduceScatter:
    case Coll::kScatter:
      l.sendElems = l.inElems = n * count;
      l.recvElems = count;
      l.inRecvOff = r * count;
      break;
    case Coll::kAllToAll:
      l.sendElems = l.recvElems = l.inElems = n * count;
      break;
  }
  l.bytes = (l.sendElems > l.recvElems ? l.sendElems : l.recvElems) * es;
  return l;
}

Layout layoutFromBytes(Coll c, size_t bytes, size_t es, int nranks, int rank) {
  bool perRank = c == Coll::kAllGather || c == Coll::kGather || c == Coll::kReduceScatter ||
                 c == Coll::kScatter || c == Coll::kAllToAll;
  size_t count = bytes / es / (perRank ? static_cast<size_t>(nranks) : 1);
  return layoutFromCount(c, count, es, nranks, rank);
}

bool inPlaceSupported(Coll c) { return c != Coll::kAllToAll && c != Coll::kSendRecv; }

std::string worldUnsupportedReason(Coll c, int nranks) {
  if (c == Coll::kSendRecv && nranks == 1) {
    return "sendrecv needs 2 or more ranks (libxccl rejects a send to self)";
  }
  return "";
}

double busFactor(Coll c, int nranks) {
  double n = nranks;
  switch (c) {
    case Coll::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kGather:
    case Coll::kScatter:
      return (n - 1) / n;
    default:
      return 1.0;
  }
}

std::string unsupportedReason(Coll c, xcclDataType_t t, xcclRedOp_t op) {
  if (!collInfo(c).hasOp) return "";
  std::string why = opUnsupportedReason(t, op);
  if (!why.empty()) return why;
  if (op == xcclPremulSum && c != Coll::kAllReduce) {
    return std::string("premulsum is only available for all_reduce (xcclAllReducePremulSum); ") +
           "xccl" + (c == Coll::kReduce ? "Reduce" : "ReduceScatter") + " has no scalar argument";
  }
  return "";
}

xcclResult_t issue(const OpArgs& a, const void* send, void* recv, xcclComm_t comm, int rank,
                   int nranks, const char** what, xcclStream_t stream) {
  switch (a.coll) {
    case Coll::kAllReduce:
      if (a.op == xcclPremulSum) {
        *what = "xcclAllReducePremulSum";
        char scalar[8];
        store(scalar, a.type, 0, premulScalar(a.type));
        return xcclAllReducePremulSum(send, recv, a.count, a.type, scalar, comm, stream);
      }
      *what = "xcclAllReduce";
      return xcclAllReduce(send, recv, a.count, a.type, a.op, comm, stream);
    case Coll::kAllGather:
      *what = "xcclAllGather";
      return xcclAllGather(send, recv, a.count, a.type, comm, stream);
    case Coll::kReduceScatter:
      *what = "xcclReduceScatter";
      return xcclReduceScatter(send, recv, a.count, a.type, a.op, comm, stream);
    case Coll::kBroadcast:
      *what = "xcclBroadcast";
      return xcclBroadcast(send, recv, a.count, a.type, a.root, comm, stream);
    case Coll::kReduce:
      *what = "xcclReduce";
      return xcclReduce(send, recv, a.count, a.type, a.op, a.root, comm, stream);
    case Coll::kAllToAll:
      *what = "xcclAllToAll";
      return xcclAllToAll(send, recv, a.count, a.type, comm, stream);
    case Coll::kGather:
      *what = "xcclGather";
      return xcclGather(send, recv, a.count, a.type, a.root, comm, stream);
    case Coll::kScatter:
      *what = "xcclScatter";
      return xcclScatter(send, recv, a.count, a.type, a.root, comm, stream);
    case Coll::kSendRecv: {
      int next = (rank + 1) % nranks, prev = (rank - 1 + nranks) % nranks;
      *what = "xcclGroupStart";
      xcclResult_t r = xcclGroupStart();
      if (r != xcclSuccess) return r;
      *what = "xcclSend";
      r = xcclSend(send, a.count, a.type, next, comm, stream);
      if (r == xcclSuccess) {
        *what = "xcclRecv";
        r = xcclRecv(recv, a.count, a.type, prev, comm, stream);
      }
      xcclResult_t e = xcclGroupEnd();  // always close the group, even after a failure
      if (r == xcclSuccess && e != xcclSuccess) *what = "xcclGroupEnd";
      return r != xcclSuccess ? r : e;
    }
  }
  return xcclInvalidArgument;
}

int64_t verifyRecv(const OpArgs& a, const Layout& l, const Generator& gen, int rank, int nranks,
                   const void* recv, std::string* firstBad) {
  bool rooted = a.coll == Coll::kReduce || a.coll == Coll::kGather;
  if (rooted && rank != a.root) return 0;
  const xcclDataType_t t = a.type;
  const size_t count = l.count;
  int64_t wrong = 0;
  auto check = [&](size_t idx, const Expected& e) {
    if (matches(recv, t, idx, e)) return;
    if (wrong++ == 0 && firstBad) *firstBad = describe(t, idx, load(recv, t, idx), e);
  };
  auto copied = [&](size_t idx, int srcRank, uint64_t srcIdx) {
    Expected e;
    e.v = gen.at(srcRank, srcIdx);
    check(idx, e);
  };
  switch (a.coll) {
    case Coll::kAllReduce:
    case Coll::kReduce:
    case Coll::kReduceScatter: {
      Reducer red(gen, a.op, nranks);
      uint64_t base = a.coll == Coll::kReduceScatter ? static_cast<uint64_t>(rank) * count : 0;
      for (size_t j = 0; j < count; ++j) check(j, red.at(base + j));
      break;
    }
    case Coll::kAllGather:
    case Coll::kGather:
      for (int b = 0; b < nranks; ++b) {
        for (size_t j = 0; j < count; ++j) copied(b * count + j, b, j);
      }
      break;
    case Coll::kAllToAll:
      for (int b = 0; b < nranks; ++b) {
        for (size_t j = 0; j < count; ++j) copied(b * count + j, b, rank * count + j);
      }
      break;
    case Coll::kBroadcast:
      for (size_t j = 0; j < count; ++j) copied(j, a.root, j);
      break;
    case Coll::kScatter:
      for (size_t j = 0; j < count; ++j) copied(j, a.root, rank * count + j);
      break;
    case Coll::kSendRecv:
      for (size_t j = 0; j < count; ++j) copied(j, (rank - 1 + nranks) % nranks, j);
      break;
  }
  return wrong;
}

}  // namespace xt
