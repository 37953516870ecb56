#include "auth.h"

#include <sys/random.h>

#include <cerrno>

#include "error.h"
#include "sha256.h"

namespace xccl {
namespace auth {

std::string nonce() {
  std::string out(kNonceBytes, '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::getrandom(&out[got], out.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    XCCL_SYSCHECK(n, "getrandom");
    got += static_cast<size_t>(n);
  }
  return out;
}

std::string proof(const std::string& secret, const std::string& label,
                  const std::string& verifierNonce, const std::string& proverNonce,
                  const std::string& context) {
  std::string msg;
  for (const std::string* part : {&label, &verifierNonce, &proverNonce, &context}) {
    // Each part length-prefixed, so no two different tuples give one message.
    const uint32_t n = static_cast<uint32_t>(part->size());
    msg.append(reinterpret_cast<const char*>(&n), sizeof(n));
    msg += *part;
  }
  const std::array<uint8_t, 32> mac = hmacSha256(secret, msg);
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}

bool sameProof(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace auth
}  // namespace xccl
