// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the handshakes' proofs (auth.h).
//
// Written here rather than taken from OpenSSL's libcrypto on purpose: libcrypto 3 takes
// process-wide locks inside every digest fetch, and a process that forks while one of this
// library's threads (the unique-id store server, a handshake) holds one hangs its child for
// good (seen under ASan in UniqueIdStore.ProcessesShareKeys, gdb: the child stuck in
// OPENSSL_init_crypto's write lock). These are pure functions on the caller's stack: no
// locks, no global state, nothing to initialise. Checked against the FIPS 180-2 and RFC 4231
// test vectors (tests/cpp/test_transport.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace xccl {

std::array<uint8_t, 32> sha256(const void* data, size_t len);
std::array<uint8_t, 32> hmacSha256(const std::string& key, const std::string& message);

}  // namespace xccl
