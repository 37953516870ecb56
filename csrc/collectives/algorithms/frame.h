// The wire format of the progress engine (exchange.h): every message is a 64-byte header
// followed by its payload padded to a multiple of 64 bytes, so a header never straddles a
// ring's end (rings are multiples of 64 bytes) and a window never splits an element.
//
//   | magic | type | flags | sequence | payload bytes | count | root | dtype | op |
//   | reserved[2] | check |
//
// The sender's call (collective, dtype, op, root, count) travels in every header, and the
// receiver compares it with its own (Exchange::checkHeader); `check` guards the header
// against corruption. Abort frames carry the failing rank's reason as their payload.
// Peer-read frames (kFlagPeerRead) carry a reference to the sender's buffer instead of it.
// Checksummed frames (kFlagChecksum, XCCL_CHECKSUM=1) are followed, after their pad, by a
// 64-byte trailer with the hash of the payload as the sender wrote it into the transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "collectives/transport/transport.h"
#include "exchange.h"

namespace xccl {

constexpr uint32_t kFrameMagic = 0x58434c32;  // "XCL2": the 64-byte header with the caller's call
constexpr size_t kFrameAlign = 64;
constexpr uint16_t kFlagP2P = 1;
constexpr uint16_t kFlagAbort = 2;  // payload: the sender's error text
// A peer-read frame: the header (bytes = the message's) is followed by a 64-byte PeerRef
// (device.h) in the byte stream instead of the payload; the receiver reads the payload from
// the sender's buffer in place and bumps Connection::peerReadDone(). No pad.
constexpr uint16_t kFlagPeerRead = 4;
constexpr size_t kMaxAbortText = 960;  // an abort frame is at most 1 KiB
// The payload's hash (common/sum64.h) travels in a trailer after the pad (in the byte stream, where
// headers go): the sender hashes each slice as it copies it into the transport, so a
// message forwarded slice by slice (sendForward) needs nothing whole.
constexpr uint16_t kFlagChecksum = 8;
constexpr uint32_t kTrailerMagic = 0x58434b31;  // "XCK1"

struct FrameHeader {
  uint32_t magic;
  uint16_t type;  // CollType of the sender's call
  uint16_t flags;
  uint64_t seq;    // collective sequence number, or per-peer point-to-point counter
  uint64_t bytes;  // payload bytes of this message
  uint64_t count;  // the sender's call: element count (normalised, see OpSignature)
  int32_t root;    // ... root (-1: none)
  int16_t dtype;   // ... xcclDataType_t (-1: none)
  int16_t op;      // ... xcclRedOp_t (-1: not a reduction)
  uint64_t reserved[2];
  uint64_t check;
};
static_assert(sizeof(FrameHeader) == kFrameAlign, "header is one alignment unit");

struct FrameTrailer {
  uint32_t magic;  // kTrailerMagic
  uint32_t reserved0;
  uint64_t hash;   // the payload's hash (common/sum64.h)
  uint64_t bytes;  // the payload's size (the header's)
  uint64_t seq;    // the header's sequence number
  uint64_t reserved[4];
};
static_assert(sizeof(FrameTrailer) == kFrameAlign, "trailer is one alignment unit");

uint64_t headerCheck(const FrameHeader& h);
inline size_t padOf(size_t bytes) { return (kFrameAlign - bytes % kFrameAlign) % kFrameAlign; }
FrameHeader makeHeader(const OpSignature& sig, uint16_t flags, uint64_t seq, uint64_t bytes);
OpSignature signatureOfHeader(const FrameHeader& h);
inline bool validHeader(const FrameHeader& h) {
  return h.magic == kFrameMagic && h.check == headerCheck(h);
}

// Reads the 64-byte header of the next message from `peer` into h.
// Returns false when it has not fully arrived yet.
inline bool peekHeader(Connection* c, FrameHeader* h) {
  const void* win = nullptr;
  if (c->peekRecv(&win) < sizeof(FrameHeader)) return false;
  std::memcpy(h, win, sizeof(*h));
  return true;
}

}  // namespace xccl
