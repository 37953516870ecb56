// Point-to-point: one message, "p2p".
//
//   send:     me --[count elements of sendbuf]--> args.root (the peer)
//   recv:     args.root --> recvbuf
//   recvany:  whichever rank's point-to-point send arrives first --> recvbuf; its rank is
//             written to *args.anyPeerOut
//
// Point-to-point messages carry their own per-peer sequence numbers in the engine, so they
// never match a collective's data. Zero-byte messages are still sent (a handshake).
#include "schedule.h"

namespace xccl {
namespace algo {

namespace {

void p2pRun(Exchange& ex, const CollArgs& args) {
  const size_t bytes = args.count * dtypeSize(args.dtype);
  switch (args.type) {
    case CollType::kSend:
      ex.send(args.root, args.sendbuf, bytes);
      break;
    case CollType::kRecv:
      ex.recv(args.root, args.recvbuf, bytes);
      break;
    case CollType::kRecvAny:
      ex.recvAny(args.recvbuf, bytes, args.anyPeerOut);
      break;
    default:
      XCCL_CHECK(false, "p2p algorithm called for ", collName(args.type));
  }
  ex.wait();
}

bool always(const CollArgs&, const Exchange&) { return true; }

}  // namespace

std::vector<Algorithm> p2pAlgorithms() {
  return {{"p2p", CollType::kSend, always, p2pRun},
          {"p2p", CollType::kRecv, always, p2pRun},
          {"p2p", CollType::kRecvAny, always, p2pRun}};
}

}  // namespace algo
}  // namespace xccl
