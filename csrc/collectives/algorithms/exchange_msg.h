// A message posted on the Exchange, as the engine's files share it (internal to
// exchange*.cc). Sends and receives walk the phases of their frame (frame.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/device/device.h"
#include "exchange.h"
#include "xccl.h"

namespace xccl {

enum class MsgKind { kSend, kRecv, kRecvReduce };
// Sends and receives: header, payload, pad. A peer-read send: header, ref (its PeerRef in
// the stream), awaitRead (until the peer says it read the buffer); a peer-read receive:
// header, ref, payload (read from the sender's buffer, mapped at peerSrc).
// A checksummed message (XCCL_CHECKSUM=1) adds trailer after pad.
enum class Phase { kHeader, kRef, kPayload, kPad, kTrailer, kAwaitRead };

struct PendingMsg {
  MsgKind kind;
  int peer;
  bool p2p;
  const char* src = nullptr;    // send: device source
  char* dst = nullptr;          // recv: device destination
  const char* local = nullptr;  // recvReduce: local operand
  size_t bytes = 0;
  size_t done = 0;  // payload bytes moved
  size_t padLeft = 0;
  Phase phase = Phase::kHeader;
  xcclDataType_t dtype = xcclUint8;
  xcclRedOp_t op = xcclSum;
  size_t esize = 1;
  uint64_t seq = 0;
  OpSignature sig;  // the call this message belongs to (per message for point-to-point)
  int* anyPeerOut = nullptr;
  MsgRef after;                   // sendForward: may send only what this receive has landed
  bool forwarded = false;         // a sendForward reads this receive's dst again
  int peerRead = -1;              // send: -1 undecided, 0 through the stream, 1 read by the peer
  PeerRef ref{};                  // send: its buffer, for the peer
  uint64_t readSeq = 0;           // send: its number among this link's peer-read messages
  const char* peerSrc = nullptr;  // receive: the sender's buffer, mapped here
  int* opLeft = nullptr;     // the count of its operation's unfinished messages (countMessagesIn)
  bool checksummed = false;  // its frame carries a trailer (kFlagChecksum)
  uint64_t hash = 0;         // the payload hash (common/sum64.h) of the bytes moved so far
};

}  // namespace xccl
