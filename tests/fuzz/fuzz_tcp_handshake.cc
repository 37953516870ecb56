// The TCP handshake's messages (transport/tcp/handshake.cc): a hello parsed by an acceptor
// and a challenge/reply parsed by a connector, from any bytes; a parsed hello builds back to
// the same bytes.
#include "collectives/transport/tcp/handshake.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  xccl::tcp::Hello h;
  xccl::tcp::Status status;
  std::string why;
  if (xccl::tcp::parseHello(in, 1, {0, 2, 3}, &h, &status, &why)) {
    if (xccl::tcp::makeHello(h) != in) __builtin_trap();
  } else if (why.empty()) {
    __builtin_trap();  // a refusal always says why
  }
  std::string nonce, proof;
  uint32_t st = 0;
  int kind = xccl::tcp::parseChallenge(in, 1, &nonce, &proof, &st);
  if (kind == 0 &&
      (nonce.size() != xccl::auth::kNonceBytes || proof.size() != xccl::auth::kProofBytes)) {
    __builtin_trap();
  }
  if (xccl::tcp::parseReply(in, 1, &st) &&
      xccl::tcp::makeReply(static_cast<xccl::tcp::Status>(st), 1) != in) {
    __builtin_trap();
  }
  return 0;
}

std::vector<std::string> xcclFuzzSeeds() {
  xccl::tcp::Hello h{0, 1, 0, 2, 1 << 17, std::string(16, 'n')};
  return {xccl::tcp::makeHello(h),
          xccl::tcp::makeChallenge(xccl::tcp::kOk, 1, std::string(16, 'a'), std::string(32, 'p')),
          xccl::tcp::makeReply(xccl::tcp::kBadSecret, 1)};
}
