// PeerInfo records read from the bootstrap store (bootstrap/store.cc parsePeerInfo): any
// bytes give a PeerInfo or RemoteError, and a parsed record serializes back to itself.
#include "collectives/bootstrap/bootstrap.h"
#include "collectives/bootstrap/bootstrap_internal.h"
#include "common/error.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  try {
    uint32_t flags = 0;
    xccl::PeerInfo p = xccl::parsePeerInfo(in, &flags);
    if (xccl::serializePeerInfo(p, flags) != in) __builtin_trap();  // the format is canonical
  } catch (const xccl::RemoteError&) {
  }
  return 0;
}

std::vector<std::string> xcclFuzzSeeds() {
  xccl::PeerInfo a{3,
                   4242,
                   "node-a/boot/net:[1]/pid:[2]",
                   "node-a",
                   "xdev:1",
                   "10.0.0.1:5555",
                   1,
                   "system xdev\nhost node-a\ndevices 2\nlink 0 1 XL 100\n",
                   "10.0.0.1:6000 0123456789abcdef",
                   "4242 7 1048576 4;4242 8",
                   std::string(144, '\x01')};  // a network plugin's handle and nonce
  xccl::PeerInfo b{0, 1, "", "", "", "", -1, "", "", "", ""};
  return {xccl::serializePeerInfo(a, 1), xccl::serializePeerInfo(b, 0)};
}
