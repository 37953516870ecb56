// The collectives xccl-tests exercises: their size conventions (as nccl-tests defines
// them), buffer layouts out-of-place and in-place, how one operation is issued through
// xcclXxx, the bus-bandwidth factor, and the host-side check of a result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "values.h"
#include "xccl.h"

namespace xt {

enum class Coll {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,
  kGather,
  kScatter
};

struct CollInfo {
  Coll coll;
  const char* name;  // all_reduce, all_gather, ...
  bool hasOp;        // takes a reduction op
  bool hasRoot;      // rooted collective
};

const CollInfo& collInfo(Coll c);
const std::vector<Coll>& allColls();
bool parseColl(const std::string& s, Coll* c);  // accepts all_reduce, allreduce, all_reduce_perf

// Element counts of one operation on one rank. `count` is the count argument of the API
// call (and the table's count column); `bytes` is the table's size column:
//   all_reduce, broadcast, reduce, sendrecv: bytes = count * elemsize
//   all_gather, gather: bytes = total received = nranks * count * elemsize
//   reduce_scatter, scatter, alltoall: bytes = total sent = nranks * count * elemsize
struct Layout {
  size_t count = 0;
  size_t sendElems = 0;  // out-of-place send buffer
  size_t recvElems = 0;  // out-of-place recv buffer
  size_t bytes = 0;
  size_t inElems = 0;  // in-place: one buffer of inElems; send and recv at these offsets
  size_t inSendOff = 0;
  size_t inRecvOff = 0;
};

Layout layoutFromCount(Coll c, size_t count, size_t elemSize, int nranks, int rank);
// The largest layout with bytes <= `bytes` (counts round down, as in nccl-tests).
Layout layoutFromBytes(Coll c, size_t bytes, size_t elemSize, int nranks, int rank);

// False where in-place has no defined meaning; those in-place columns print N/A:
//   alltoall: like NCCL, libxccl rejects sendbuff == recvbuff (a rank would overwrite
//             blocks it has not sent yet);
//   sendrecv: the send and the receive of a group progress concurrently, so receiving
//             into the buffer being sent races (measured: wrong data from 3 ranks on).
bool inPlaceSupported(Coll c);

// "" when the collective can run on nranks ranks. sendrecv on 1 rank would be a send to
// self, which libxccl rejects ("cannot send to itself").
std::string worldUnsupportedReason(Coll c, int nranks);

// busbw = algbw * busFactor: 2(n-1)/n for all_reduce; (n-1)/n for all_gather,
// reduce_scatter, alltoall, gather, scatter; 1 for broadcast, reduce, sendrecv.
double busFactor(Coll c, int nranks);

// "" when the combination can run, else why not (bitwise op on float, premulsum outside
// all_reduce, ...).
std::string unsupportedReason(Coll c, xcclDataType_t t, xcclRedOp_t op);

struct OpArgs {
  Coll coll;
  xcclDataType_t type;
  xcclRedOp_t op;  // ignored without hasOp
  int root;        // ignored without hasRoot
  size_t count;
};

// Enqueues one operation (sendrecv: a group of one send to rank+1 and one receive from
// rank-1). `what` names the failing call on error.
xcclResult_t issue(const OpArgs& a, const void* send, void* recv, xcclComm_t comm, int rank,
                   int nranks, const char** what, xcclStream_t stream = nullptr);

// Checks recv (this rank's result region, layout.recvElems elements) against the host
// reference; returns the number of wrong elements. Ranks that receive nothing (non-root
// reduce/gather) return 0. `firstBad` gets a description of the first wrong element.
int64_t verifyRecv(const OpArgs& a, const Layout& l, const Generator& gen, int rank, int nranks,
                   const void* recv, std::string* firstBad);

}  // namespace xt
