#include "handshake.h"

#include <cstring>

#include "common/error.h"
#include "socket.h"

namespace xccl {
namespace tcp {

namespace {
constexpr char kHelloMagic[4] = {'X', 'C', 'T', 'H'};
constexpr char kChallengeMagic[4] = {'X', 'C', 'T', 'C'};
constexpr char kReplyMagic[4] = {'X', 'C', 'T', 'R'};
}  // namespace

std::string makeHello(const Hello& h) {
  std::string out(kHelloMagic, 4);
  net::putU32(out, kHandshakeVersion);
  net::putU32(out, static_cast<uint32_t>(h.from));
  net::putU32(out, static_cast<uint32_t>(h.to));
  net::putU32(out, h.index);
  net::putU32(out, h.nsocks);
  net::putU32(out, h.chunk);
  return out + h.nonce;
}

bool parseHello(const std::string& bytes, int rank, const std::set<int>& from, Hello* out,
                Status* status, std::string* why) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  *status = kOk;
  if (bytes.size() != kHelloBytes || std::memcmp(b, kHelloMagic, 4) != 0 ||
      net::getU32(b + 4) != kHandshakeVersion) {
    *why = "bad handshake (not an xccl peer, or another version)";
    return false;
  }
  out->from = static_cast<int>(net::getU32(b + 8));
  out->to = static_cast<int>(net::getU32(b + 12));
  if (out->to != rank || !from.count(out->from)) {
    *status = kBadRank;
    *why = strCat("unexpected ranks ", out->from, " -> ", out->to);
    return false;
  }
  out->index = net::getU32(b + 16);
  out->nsocks = net::getU32(b + 20);
  out->chunk = net::getU32(b + 24);
  if (out->nsocks < 1 || out->nsocks > kMaxSocks || out->index > out->nsocks ||
      out->chunk < kMinChunk || out->chunk > kMaxChunk || out->chunk % 64 != 0) {
    *status = kBadRank;
    *why = strCat("bad socket striping from rank ", out->from, " (socket ", out->index, " of ",
                  out->nsocks, ", chunk ", out->chunk, ")");
    return false;
  }
  out->nonce = bytes.substr(kHelloBytes - auth::kNonceBytes);
  return true;
}

std::string makeChallenge(Status status, int rank, const std::string& nonce,
                          const std::string& proof) {
  std::string c(kChallengeMagic, 4);
  net::putU32(c, status);
  net::putU32(c, static_cast<uint32_t>(rank));
  return c + nonce + proof;
}

std::string makeReply(Status status, int rank) {
  std::string r(kReplyMagic, 4);
  net::putU32(r, status);
  net::putU32(r, static_cast<uint32_t>(rank));
  return r;
}

std::string proofContext(int from, int to, uint32_t index) {
  return strCat("xccl-tcp ", from, "->", to, " socket ", index);
}

int parseChallenge(const std::string& bytes, int peer, std::string* nonce, std::string* proof,
                   uint32_t* status) {
  if (bytes.size() < kReplyBytes) return -1;
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  if (std::memcmp(b, kReplyMagic, 4) == 0) {
    *status = net::getU32(b + 4);
    return 1;
  }
  if (std::memcmp(b, kChallengeMagic, 4) != 0 || bytes.size() != kChallengeBytes ||
      static_cast<int>(net::getU32(b + 8)) != peer) {
    return -1;
  }
  *status = net::getU32(b + 4);
  *nonce = bytes.substr(kReplyBytes, auth::kNonceBytes);
  *proof = bytes.substr(kReplyBytes + auth::kNonceBytes);
  return 0;
}

bool isChallenge(const std::string& first) {
  return first.size() >= 4 && std::memcmp(first.data(), kChallengeMagic, 4) == 0;
}

bool parseReply(const std::string& bytes, int peer, uint32_t* status) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() != kReplyBytes || std::memcmp(b, kReplyMagic, 4) != 0 ||
      static_cast<int>(net::getU32(b + 8)) != peer) {
    return false;
  }
  *status = net::getU32(b + 4);
  return true;
}

}  // namespace tcp
}  // namespace xccl
