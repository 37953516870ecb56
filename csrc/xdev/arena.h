// Device memory that other processes of the host can map (the role CUDA IPC plays for
// cudaMalloc'd memory): xdev device allocations come from segments of anonymous memfd
// memory, so a peer maps a segment through /proc/<pid>/fd/<fd> and reads or writes a
// buffer in place (xdevIpcGetMemHandle / xdevIpcOpenMemHandle; libxccl's single-copy
// transfers). Sub-allocation is first fit with coalescing; a freed range of a few MiB
// gives its pages back (a hole is punched), so freed device memory does not stay resident.
//
//   segment = memfd of max(XCCL_XDEV_SEGMENT, request) bytes, mapped once, MADV_DONTFORK
//             (a forked child does not inherit device memory, as with CUDA), with a random
//             64-bit id so that a mapping cached by a peer is never confused with a later
//             segment of a process that reused the pid or the fd number.
//   Segments live as long as the process: a peer may keep its mapping, and memory punched
//   out of a segment reads as zeros, never faults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace xdev {

// Where a byte of arena memory is, for another process: enough to map its segment and
// find the byte (xdevIpcMemHandle_t carries it).
struct ArenaRef {
  uint64_t segmentId = 0;
  int64_t fd = -1;
  uint64_t segmentBytes = 0;
  uint64_t offset = 0;  // of the byte in its segment
};

class Arena {
 public:
  explicit Arena(size_t segmentBytes) : segmentBytes_(segmentBytes) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // `bytes` (a multiple of the alignment the caller wants, >= 256-byte aligned) of zeroed or
  // reused memory; throws std::bad_alloc when the host cannot provide a segment.
  void* alloc(size_t bytes);
  // Returns [p, p + bytes), which alloc() gave.
  void release(void* p, size_t bytes);
  // The arena byte at p, or false when p is not arena memory.
  bool locate(const void* p, ArenaRef* out);
  // The byte a reference of this process names, or nullptr when it names none.
  void* byteOf(const ArenaRef& ref);

 private:
  struct Segment {
    uint64_t id;
    int fd;
    char* base;
    size_t bytes;
    std::map<size_t, size_t> free;  // offset -> length, coalesced
  };
  void* carve(Segment& s, size_t bytes);
  void punch(Segment& s, size_t offset, size_t length);

  const size_t segmentBytes_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Segment>> segments_;
};

// The peer side: maps other processes' segments (cached by segment id: mapped once, kept
// while this process lives) and returns the local address of the referenced byte.
class PeerSegments {
 public:
  ~PeerSegments();
  // Throws Failure(xdevErrorInvalidValue) for a malformed reference, Failure(
  // xdevErrorMapFailed) when the owner's segment cannot be opened (it exited).
  // `fresh`, when given, receives the mapping's base and size if this call made it (NULL
  // base when the segment was mapped before).
  void* open(int ownerPid, const ArenaRef& ref, std::pair<void*, size_t>* fresh = nullptr);

 private:
  struct Mapped {
    int fd;
    void* base;
    size_t bytes;
  };
  std::mutex mu_;
  std::map<std::pair<int, uint64_t>, Mapped> mapped_;  // (pid, segment id)
};

}  // namespace xdev
