// SymmetricMemory.hpp — torch's symmetric memory (torch.distributed._symmetric_memory) on
// xdev: the allocator torch asks for PrivateUse1 tensors (symm_mem.empty(device="xdev:i")),
// the object symm_mem.rendezvous(t, group) returns (every rank's buffer and signal pad,
// mapped here), and the stream-ordered signals the ops (SymmetricOps.cpp) are built on.
// docs/MEMORY.md, "torch symmetric memory on xdev".
//
// An allocation is an xdev buffer plus a signal pad (torch's signal-pad size, zero-filled),
// both in xdev's shareable segments. The rendezvous allgathers one record per rank over the
// group (its IPC handles, size, process and host) and opens the handles of the ranks of this
// host; xdev registers a mapped peer segment as device memory of this device, so tensors over
// a peer's buffer (get_buffer) work like any xdev tensor. Ranks on other hosts get null
// pointers, as CUDA's symmetric memory gives them.
//
// Signals follow torch's CUDA implementation in meaning: a pad is channels x world uint32
// slots; put_signal(dst, ch) turns dst's slot (ch, me) from 0 to 1 once it is 0, and
// wait_signal(src, ch) turns this rank's slot (ch, src) from 1 back to 0, so pads are zero
// again after every matched pair. They run on the current xdev stream (host functions on
// its worker), after the work queued before them. A wait gives up with an error when the
// peer's process exits (looked at every 50 ms), when one of the peer's operations on this
// memory failed (a word past its pad says so), or after timeout_ms (0: 600 s, where CUDA
// would wait forever); the error is the stream's sticky launch failure and names the rank.
#pragma once

#include <torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace torch_xccl {

// An xdev buffer and its signal pad, freed (xdevFree) when the last holder lets go: the
// tensor's storage (through the allocator) or a SymmetricMemory made from it.
struct SymmSegment {
  void* buf = nullptr;
  size_t bytes = 0;
  void* pad = nullptr;
  size_t padBytes = 0;
  int device = 0;
  ~SymmSegment();
};

class XdevSymmetricMemory final : public c10d::symmetric_memory::SymmetricMemory {
 public:
  struct Rank {
    void* buf = nullptr;  // null: the rank is on another host
    void* pad = nullptr;
    int pid = 0;
  };
  XdevSymmetricMemory(std::shared_ptr<SymmSegment> own, std::vector<Rank> ranks, int rank,
                      size_t offset, std::string group);
  ~XdevSymmetricMemory() override;

  std::vector<void*> get_buffer_ptrs() override { return bufs_; }
  std::vector<void*> get_signal_pad_ptrs() override { return pads_; }
  void** get_buffer_ptrs_dev() override { return bufsDev_; }
  void** get_signal_pad_ptrs_dev() override { return padsDev_; }
  size_t get_buffer_size() override { return own_->bytes; }
  size_t get_offset() override { return offset_; }
  bool has_multicast_support() override { return false; }
  void* get_multicast_ptr() override { return nullptr; }
  void barrier(int channel, size_t timeout_ms) override;
  void put_signal(int dst_rank, int channel, size_t timeout_ms) override;
  void wait_signal(int src_rank, int channel, size_t timeout_ms) override;
  int get_rank() override { return rank_; }
  int get_world_size() override { return static_cast<int>(ranks_.size()); }
  c10::Device get_device() override;
  bool world_within_direct_access() override;

  // For the ops: a rank's buffer (null across hosts) and the group's name.
  char* bufferOf(int r) const { return static_cast<char*>(ranks_[r].buf); }
  const std::string& group() const { return group_; }
  // Run fn on the current stream of this memory's device, after the work queued there.
  void enqueue(std::function<void()> fn);
  // On the stream worker: the signal operations themselves (they throw on a peer's death or
  // the timeout).
  void barrierNow(int channel, size_t timeoutMs);
  void putNow(int dst, int channel, size_t timeoutMs);
  void waitNow(int src, int channel, size_t timeoutMs);

 private:
  uint32_t* slot(int owner, int channel, int src);
  void swapNow(uint32_t* slot, uint32_t from, uint32_t to, int peer, size_t timeoutMs,
               const std::function<std::string()>& what);
  uint32_t* failedWord(int r);  // past rank r's signal pad: its operation here failed
  void checkChannel(const char* what, int channel, int peer);

  std::shared_ptr<SymmSegment> own_;
  std::vector<Rank> ranks_;
  std::vector<void*> bufs_, pads_;
  void** bufsDev_ = nullptr;  // xdev arrays of world pointers (for kernels that want them)
  void** padsDev_ = nullptr;
  int rank_;
  size_t offset_;
  std::string group_;
};

// Runs fn on the current xdev stream of `d`, after the work queued there (a host function on
// its worker; what fn throws becomes the stream's sticky launch failure, with its message).
void enqueueOnCurrentStream(const c10::Device& d, std::function<void()> fn);

// The symmetric memory `t` lies in, for `group` (made on first use: a collective then).
c10::intrusive_ptr<XdevSymmetricMemory> symmetricMemoryOf(const at::Tensor& t,
                                                          const std::string& group);

}  // namespace torch_xccl
