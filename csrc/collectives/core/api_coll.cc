// The collective and point-to-point entries. Each one builds its call as one CollArgs and
// hands it to submit(), whose validator holds every check a CollArgs can express; an entry
// itself checks only what cannot reach a CollArgs (a NULL scalar or count array, premulsum
// asked of the plain allreduce). guarded() names the entry in every message.
#include <cstring>
#include <utility>

#include "api_edge.h"
#include "collectives/device/device.h"

namespace xccl {
namespace {

CollArgs call(CollType type, const void* sendbuf, void* recvbuf, size_t count, xcclDataType_t dtype,
              xcclRedOp_t op = xcclSum, int root = 0) {
  CollArgs a;
  a.type = type;
  a.sendbuf = sendbuf;
  a.recvbuf = recvbuf;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.root = root;
  return a;
}

// One entry: the handle, then the call built by build(comm), checked and submitted once.
template <typename Build>
xcclResult_t entry(const char* what, xcclComm_t comm, xcclStream_t stream, Build&& build) {
  return guarded(what, [&] {
    Comm& c = commOf(comm);
    submit(c, build(static_cast<const Comm&>(c)), stream);
  });
}

}  // namespace
}  // namespace xccl

using namespace xccl;  // NOLINT: this file is the API edge

extern "C" {

xcclResult_t xcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           xcclDataType_t datatype, xcclRedOp_t op, xcclComm_t comm,
                           xcclStream_t stream) {
  return entry("xcclAllReduce", comm, stream, [&](const Comm&) {
    XCCL_CHECK_ARG(op != xcclPremulSum, "use xcclAllReducePremulSum for premulsum");
    return call(CollType::kAllReduce, sendbuff, recvbuff, count, datatype, op);
  });
}

xcclResult_t xcclAllReducePremulSum(const void* sendbuff, void* recvbuff, size_t count,
                                    xcclDataType_t datatype, const void* scalar, xcclComm_t comm,
                                    xcclStream_t stream) {
  return entry("xcclAllReducePremulSum", comm, stream, [&](const Comm&) {
    XCCL_CHECK_ARG(scalar != nullptr, "scalar is NULL");
    CollArgs a = call(CollType::kAllReduce, sendbuff, recvbuff, count, datatype, xcclPremulSum);
    // dtypeSize is 0 for an invalid datatype, which the validator then refuses.
    std::memcpy(a.scalar, scalar, dtypeSize(datatype));
    return a;
  });
}

xcclResult_t xcclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           xcclDataType_t datatype, int root, xcclComm_t comm,
                           xcclStream_t stream) {
  return entry("xcclBroadcast", comm, stream, [&](const Comm&) {
    return call(CollType::kBroadcast, sendbuff, recvbuff, count, datatype, xcclSum, root);
  });
}

xcclResult_t xcclReduce(const void* sendbuff, void* recvbuff, size_t count, xcclDataType_t datatype,
                        xcclRedOp_t op, int root, xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclReduce", comm, stream, [&](const Comm&) {
    return call(CollType::kReduce, sendbuff, recvbuff, count, datatype, op, root);
  });
}

xcclResult_t xcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           xcclDataType_t datatype, xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclAllGather", comm, stream, [&](const Comm&) {
    return call(CollType::kAllGather, sendbuff, recvbuff, sendcount, datatype);
  });
}

xcclResult_t xcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               xcclDataType_t datatype, xcclRedOp_t op, xcclComm_t comm,
                               xcclStream_t stream) {
  return entry("xcclReduceScatter", comm, stream, [&](const Comm&) {
    return call(CollType::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op);
  });
}

xcclResult_t xcclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          xcclDataType_t datatype, xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclAllToAll", comm, stream, [&](const Comm&) {
    return call(CollType::kAllToAll, sendbuff, recvbuff, count, datatype);
  });
}

xcclResult_t xcclAllToAllv(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                           void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                           xcclDataType_t datatype, xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclAllToAllv", comm, stream, [&](const Comm& c) {
    XCCL_CHECK_ARG(sendcounts && sdispls && recvcounts && rdispls,
                   "counts and displacements must be non-NULL");
    CollArgs a = call(CollType::kAllToAllv, sendbuff, recvbuff, 0, datatype);
    const int n = c.nranks();
    a.sendcounts.assign(sendcounts, sendcounts + n);
    a.sdispls.assign(sdispls, sdispls + n);
    a.recvcounts.assign(recvcounts, recvcounts + n);
    a.rdispls.assign(rdispls, rdispls + n);
    return a;
  });
}

xcclResult_t xcclAllGatherv(const void* sendbuff, size_t sendcount, void* recvbuff,
                            const size_t* recvcounts, const size_t* displs, xcclDataType_t datatype,
                            xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclAllGatherv", comm, stream, [&](const Comm& c) {
    XCCL_CHECK_ARG(recvcounts && displs, "recvcounts and displs must be non-NULL");
    CollArgs a = call(CollType::kAllGatherv, sendbuff, recvbuff, sendcount, datatype);
    a.recvcounts.assign(recvcounts, recvcounts + c.nranks());
    a.rdispls.assign(displs, displs + c.nranks());
    return a;
  });
}

xcclResult_t xcclReduceScatterv(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                const size_t* displs, xcclDataType_t datatype, xcclRedOp_t op,
                                xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclReduceScatterv", comm, stream, [&](const Comm& c) {
    XCCL_CHECK_ARG(recvcounts && displs, "recvcounts and displs must be non-NULL");
    XCCL_CHECK_ARG(op != xcclPremulSum,
                   "premulsum needs a scalar, which this entry does not take (scale the input "
                   "first)");
    CollArgs a = call(CollType::kReduceScatterv, sendbuff, recvbuff, 0, datatype, op);
    a.recvcounts.assign(recvcounts, recvcounts + c.nranks());
    a.sdispls.assign(displs, displs + c.nranks());
    return a;
  });
}

xcclResult_t xcclGather(const void* sendbuff, void* recvbuff, size_t count, xcclDataType_t datatype,
                        int root, xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclGather", comm, stream, [&](const Comm&) {
    return call(CollType::kGather, sendbuff, recvbuff, count, datatype, xcclSum, root);
  });
}

xcclResult_t xcclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         xcclDataType_t datatype, int root, xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclScatter", comm, stream, [&](const Comm&) {
    return call(CollType::kScatter, sendbuff, recvbuff, count, datatype, xcclSum, root);
  });
}

xcclResult_t xcclSend(const void* sendbuff, size_t count, xcclDataType_t datatype, int peer,
                      xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclSend", comm, stream, [&](const Comm&) {
    return call(CollType::kSend, sendbuff, nullptr, count, datatype, xcclSum, peer);
  });
}

xcclResult_t xcclRecv(void* recvbuff, size_t count, xcclDataType_t datatype, int peer,
                      xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclRecv", comm, stream, [&](const Comm&) {
    return call(CollType::kRecv, nullptr, recvbuff, count, datatype, xcclSum, peer);
  });
}

xcclResult_t xcclRecvAny(void* recvbuff, size_t count, xcclDataType_t datatype, int* peer,
                         xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclRecvAny", comm, stream, [&](const Comm&) {
    CollArgs a = call(CollType::kRecvAny, nullptr, recvbuff, count, datatype);
    a.anyPeerOut = peer;
    return a;
  });
}

xcclResult_t xcclBarrier(xcclComm_t comm, xcclStream_t stream) {
  return entry("xcclBarrier", comm, stream, [&](const Comm&) {
    return call(CollType::kBarrier, nullptr, nullptr, 0, xcclUint8);
  });
}

}  // extern "C"
