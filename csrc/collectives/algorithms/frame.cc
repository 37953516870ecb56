// The wire format (frame.h) and the names of calls.
#include "frame.h"

#include "common/error.h"
#include "xccl.h"

namespace xccl {

uint64_t headerCheck(const FrameHeader& h) {
  uint64_t x =
      (static_cast<uint64_t>(h.magic) << 32) ^ (static_cast<uint64_t>(h.type) << 16) ^ h.flags;
  x ^= h.seq * 0x9e3779b97f4a7c15ULL;
  x ^= h.bytes * 0xc2b2ae3d27d4eb4fULL;
  x ^= h.count * 0x165667b19e3779f9ULL;
  x ^= (static_cast<uint64_t>(static_cast<uint32_t>(h.root)) << 32 |
        static_cast<uint64_t>(static_cast<uint16_t>(h.dtype)) << 16 | static_cast<uint16_t>(h.op)) *
       0x27d4eb2f165667c5ULL;
  return x ^ (x >> 29);
}

FrameHeader makeHeader(const OpSignature& sig, uint16_t flags, uint64_t seq, uint64_t bytes) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = static_cast<uint16_t>(sig.type);
  h.flags = flags;
  h.seq = seq;
  h.bytes = bytes;
  h.count = sig.count;
  h.root = sig.root;
  h.dtype = static_cast<int16_t>(sig.dtype);
  h.op = static_cast<int16_t>(sig.op);
  h.check = headerCheck(h);
  return h;
}

OpSignature signatureOfHeader(const FrameHeader& h) {
  OpSignature sig;
  sig.type = static_cast<CollType>(h.type);
  sig.dtype = h.dtype;
  sig.op = h.op;
  sig.root = h.root;
  sig.count = h.count;
  return sig;
}

OpSignature signatureOf(const CollArgs& args) {
  OpSignature sig;
  sig.type = args.type;
  if (args.type != CollType::kBarrier) sig.dtype = static_cast<int>(args.dtype);
  if (isReduction(args.type)) sig.op = static_cast<int>(args.op);
  if (hasRoot(args.type)) sig.root = args.root;
  if (!isVector(args.type) && args.type != CollType::kBarrier) sig.count = args.count;
  return sig;
}

std::string describeCall(const OpSignature& sig) {
  std::string s = strCat(collName(sig.type), "(");
  if (sig.type == CollType::kBarrier) return s + ")";
  const bool knownType = sig.dtype >= 0 && sig.dtype < xcclNumTypes;
  s += knownType ? xcclTypeName(static_cast<xcclDataType_t>(sig.dtype))
                 : strCat("dtype ", sig.dtype);
  if (!isVector(sig.type)) s += strCat(", ", sig.count);
  if (sig.op >= 0 && sig.op < xcclNumOps)
    s += strCat(", ", xcclOpName(static_cast<xcclRedOp_t>(sig.op)));
  if (sig.op >= xcclNumOps) s += strCat(", op ", sig.op);
  if (sig.root >= 0) s += strCat(", root ", sig.root);
  return s + ")";
}

const char* collName(CollType type) {
  switch (type) {
    case CollType::kAllReduce:
      return "allreduce";
    case CollType::kBroadcast:
      return "broadcast";
    case CollType::kReduce:
      return "reduce";
    case CollType::kAllGather:
      return "allgather";
    case CollType::kReduceScatter:
      return "reducescatter";
    case CollType::kAllToAll:
      return "alltoall";
    case CollType::kAllToAllv:
      return "alltoallv";
    case CollType::kGather:
      return "gather";
    case CollType::kScatter:
      return "scatter";
    case CollType::kSend:
      return "send";
    case CollType::kRecv:
      return "recv";
    case CollType::kRecvAny:
      return "recvany";
    case CollType::kBarrier:
      return "barrier";
    case CollType::kAllGatherv:
      return "allgatherv";
    case CollType::kReduceScatterv:
      return "reducescatterv";
  }
  return "unknown";
}

}  // namespace xccl
