// Memory shared between processes of one host: an anonymous memfd (no name in /dev/shm, freed
// by the kernel when its last fd and mapping go, even after a crash) that a peer opens through
// /proc/<pid>/fd/<fd>. Used by the shared-memory transport for its rings and by the host
// device for shareable "device" memory.
#pragma once

#include <cstddef>
#include <string>

namespace xccl {

struct SharedMapping {
  int fd = -1;
  void* base = nullptr;
  size_t bytes = 0;
};

// A fresh zero-filled mapping of `bytes` bytes; `what` names it in errors. Throws IoError.
SharedMapping createSharedMapping(size_t bytes, const char* what);
// Maps process `pid`'s memfd `fd`, which must be exactly `bytes` long. Throws IoError when it
// cannot be opened or mapped, RemoteError when its size differs.
SharedMapping openSharedMapping(long pid, long fd, size_t bytes, const std::string& what);
// Maps `bytes` at `offset` (a multiple of the page size) of process `pid`'s memfd `fd`, which
// must be exactly `total` long, and closes the fd at once (the mapping keeps the memory):
// a peer's slot of an arena costs no descriptor. Throws as openSharedMapping.
SharedMapping openSharedRange(long pid, long fd, size_t total, size_t offset, size_t bytes,
                              const std::string& what);
// Unmaps and closes; a default-constructed mapping is ignored.
void closeSharedMapping(const SharedMapping& m);

}  // namespace xccl
