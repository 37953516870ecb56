// The TCP handshake's messages (one handshake per socket), as pure functions: built and
// parsed here, driven by listener.cc and connector.cc, fuzzed by tests/fuzz/fuzz_tcp_hello.cc.
//
// Mutual challenge-response over the communicator's secret (common/auth.h); the secret
// itself never travels:
//   connector -> hello     : "XCTH" | version | from | to | socket index | sockets | chunk |
//                            connector nonce (16)                               (44 bytes)
//                            (index == sockets: the heartbeat socket, one per connection)
//   acceptor  -> challenge : "XCTC" | status | rank | acceptor nonce (16) |
//                            acceptor proof (32) over the connector's nonce     (60 bytes)
//   connector -> proof     : connector proof (32) over the acceptor's nonce
//   acceptor  -> reply     : "XCTR" | status | rank                             (12 bytes)
// The connector checks the acceptor's proof before it proves itself (a listener that does
// not know the secret learns nothing); the acceptor checks the connector's; a replayed
// proof fails because the verifier's nonce is new. All integers u32 little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "common/auth.h"

namespace xccl {
namespace tcp {

constexpr uint32_t kHandshakeVersion = 4;  // 4: a heartbeat socket after the data sockets
constexpr size_t kHelloBytes = 4 + 6 * 4 + auth::kNonceBytes;
constexpr size_t kChallengeBytes = 4 + 2 * 4 + auth::kNonceBytes + auth::kProofBytes;
constexpr size_t kReplyBytes = 12;
constexpr uint32_t kMaxSocks = 64;
constexpr uint32_t kMinChunk = 4096, kMaxChunk = 64u << 20;
enum Status : uint32_t { kOk = 0, kBadSecret = 1, kBadRank = 2 };

struct Hello {
  int from = -1, to = -1;
  uint32_t index = 0, nsocks = 1, chunk = 0;
  std::string nonce;
};

std::string makeHello(const Hello& h);
// Parses a hello of exactly kHelloBytes addressed to `rank` from one of `from`. On refusal
// returns false with *status (kOk: not an xccl peer, no answer) and *why.
bool parseHello(const std::string& bytes, int rank, const std::set<int>& from, Hello* out,
                Status* status, std::string* why);
std::string makeChallenge(Status status, int rank, const std::string& nonce,
                          const std::string& proof);
std::string makeReply(Status status, int rank);
// What both proofs of one socket's handshake are bound to.
std::string proofContext(int from, int to, uint32_t index);
// The connector's reading of the acceptor's first answer (kReplyBytes then, for a
// challenge, the rest): 0 = a challenge from `peer` (nonce and proof filled), 1 = a refusal
// reply (*status), -1 = not an xccl answer.
int parseChallenge(const std::string& bytes, int peer, std::string* nonce, std::string* proof,
                   uint32_t* status);
// Whether an answer's first kReplyBytes begin a challenge (then kChallengeBytes in all).
bool isChallenge(const std::string& first);
// The acceptor's final reply: true when it comes from `peer` (status in *status).
bool parseReply(const std::string& bytes, int peer, uint32_t* status);

}  // namespace tcp
}  // namespace xccl
