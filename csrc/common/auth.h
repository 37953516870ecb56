// Mutual challenge-response over a shared secret (the communicator's, or the unique id's):
// neither side ever sends the secret. Each side sends a fresh random nonce and proves it
// knows the secret with
//
//   proof = HMAC-SHA256(secret, label | nonce of the side that verifies | own nonce | context)
//
// where `label` names the role ("acceptor" / "connector") so that one side's proof is never
// a valid proof for the other, and `context` binds the proof to this connection (ranks,
// socket index). A recorded proof is useless later: the verifier's nonce is new each time.
// HMAC-SHA256 is ours (sha256.h says why not libcrypto's).
#pragma once

#include <cstddef>
#include <string>

namespace xccl {
namespace auth {

constexpr size_t kNonceBytes = 16;
constexpr size_t kProofBytes = 32;

// kNonceBytes bytes from the OS entropy source.
std::string nonce();
// kProofBytes bytes: HMAC-SHA256(secret, label | verifierNonce | proverNonce | context).
std::string proof(const std::string& secret, const std::string& label,
                  const std::string& verifierNonce, const std::string& proverNonce,
                  const std::string& context);
// Constant-time comparison of two proofs (false when the sizes differ).
bool sameProof(const std::string& a, const std::string& b);

}  // namespace auth
}  // namespace xccl
