// The 'secret' record rank 0 publishes in the bootstrap store (bootstrap/rendezvous.cc
// parseSecretRecord): any bytes give a record or RemoteError, a parsed record formats back to
// the same bytes, and deciding whether it is stale never fails on what it names.
#include "collectives/bootstrap/bootstrap.h"
#include "collectives/bootstrap/bootstrap_internal.h"
#include "common/error.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  try {
    xccl::SecretRecord r = xccl::parseSecretRecord(in);
    if (xccl::formatSecretRecord(r) != in) __builtin_trap();  // the format is canonical
    if (r.secret.size() != 64 || r.pid <= 0 || r.startTime < 0 || r.hostId.empty()) {
      __builtin_trap();
    }
    (void)xccl::staleSecretReason(r);  // reads /proc for a pid of this host: must not throw
  } catch (const xccl::RemoteError&) {
  }
  return 0;
}

std::vector<std::string> xcclFuzzSeeds() {
  xccl::SecretRecord a;
  a.secret = std::string(64, 'a');
  a.pid = 1;
  a.startTime = 0;
  a.hostId = xccl::localHostId();
  xccl::SecretRecord b = xccl::localSecretRecord(std::string(32, 'f') + std::string(32, '0'));
  xccl::SecretRecord c = b;
  c.hostId = "node-b/boot/net:[1]/pid:[2] with spaces";
  c.pid = 2147483647;
  c.startTime = 9223372036854775807LL;
  return {xccl::formatSecretRecord(a), xccl::formatSecretRecord(b), xccl::formatSecretRecord(c)};
}
