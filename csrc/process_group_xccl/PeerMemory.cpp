// PeerMemory.cpp — plain cpu tensors in memory the processes of a host can map
// (torch_xccl.peer_memory(), docs/MEMORY.md): while it is on, torch's CPU allocator is this
// one, which serves allocations of min_bytes or more from xcclMemAlloc, so the collectives
// read a peer's tensor in place (one pass instead of two copies through the rings) the way
// they read xdev device memory. Smaller allocations, and every allocation once it is off, go
// to the allocator it replaced.
//
// Blocks are kept for reuse by size when freed (a training step allocates the same sizes
// every iteration, and a fresh memfd costs three system calls, a descriptor and page
// faults), up to kCacheBytes; beyond that they are freed. The allocator stays installed
// for the life of the process once used (storages made while it was on call it to resize),
// and forwards when off. Every pointer it hands out, its own or the replaced allocator's,
// carries one deleter (release), as torch requires of an allocator with a raw_deleter (oneDNN
// frees its scratch through raw_deallocate); release tells its own blocks from the others'.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <pybind11/pybind11.h>
#include <torch/extension.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "xccl.h"

namespace torch_xccl {
namespace {

constexpr size_t kCacheBytes = size_t{1} << 30;
constexpr size_t kPage = 4096;
constexpr uint8_t kPriority = 255;  // over any allocator another library installed

struct Stats {
  size_t liveBlocks = 0, liveBytes = 0, cachedBytes = 0, allocated = 0, reused = 0;
};

class PeerAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    size_t minBytes = 0;
    c10::Allocator* fallback = nullptr;
    {
      std::lock_guard<std::mutex> g(mu_);
      minBytes = depth_ > 0 ? minBytes_ : SIZE_MAX;
      fallback = fallback_;
    }
    if (n < minBytes || n == 0) {
      c10::DataPtr d = fallback->allocate(n);
      if (fallbackRaw_ == nullptr || d.get() != d.get_context()) return d;
      void* p = d.release_context();  // now ours to free, through the same deleter
      return {p, p, &PeerAllocator::release, c10::Device(c10::DeviceType::CPU)};
    }
    const size_t size = (n + kPage - 1) / kPage * kPage;
    void* p = takeCached(size);
    if (p == nullptr) {
      const xcclResult_t r = xcclMemAlloc(&p, size);
      TORCH_CHECK(r == xcclSuccess, "torch_xccl.peer_memory: xcclMemAlloc of ", size,
                  " bytes failed: ", xcclGetLastError(nullptr));
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      live_[p] = size;
      liveCount_.fetch_add(1);
      ++stats_.liveBlocks;
      stats_.liveBytes += size;
    }
    return {p, p, &PeerAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // One deleter for everything allocate() returns, when the replaced allocator has one too.
  c10::DeleterFnPtr raw_deleter() const override {
    return fallbackRaw_ != nullptr ? &PeerAllocator::release : nullptr;
  }

  void begin(size_t minBytes) {
    std::lock_guard<std::mutex> g(mu_);
    if (!installed_) {
      fallback_ = c10::GetCPUAllocator();
      fallbackRaw_ = fallback_->raw_deleter();
      c10::SetCPUAllocator(this, kPriority);
      installed_ = true;
    }
    if (depth_++ == 0) minBytes_ = minBytes;
  }

  void end() {
    std::lock_guard<std::mutex> g(mu_);
    TORCH_CHECK(depth_ > 0, "torch_xccl.peer_memory: ended more often than begun");
    --depth_;
  }

  py::dict stats() {
    std::lock_guard<std::mutex> g(mu_);
    py::dict d;
    d["on"] = depth_ > 0;
    d["live_blocks"] = stats_.liveBlocks;
    d["live_bytes"] = stats_.liveBytes;
    d["cached_bytes"] = stats_.cachedBytes;
    d["allocated"] = stats_.allocated;
    d["reused"] = stats_.reused;
    return d;
  }

  static PeerAllocator& get() {
    static PeerAllocator* a = new PeerAllocator();  // never destroyed: storages outlive us
    return *a;
  }

 private:
  void* takeCached(size_t size) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = cache_.find(size);
    if (it == cache_.end() || it->second.empty()) {
      ++stats_.allocated;
      return nullptr;
    }
    void* p = it->second.back();
    it->second.pop_back();
    stats_.cachedBytes -= size;
    ++stats_.reused;
    return p;
  }

  static void release(void* p) {
    PeerAllocator& a = get();
    if (p == nullptr) return;
    if (a.liveCount_.load() != 0) {  // else none of ours is alive: the replaced allocator's
      bool ours = false, keep = false;
      {
        std::lock_guard<std::mutex> g(a.mu_);
        auto it = a.live_.find(p);
        if (it != a.live_.end()) {
          ours = true;
          const size_t size = it->second;
          a.live_.erase(it);
          a.liveCount_.fetch_sub(1);
          --a.stats_.liveBlocks;
          a.stats_.liveBytes -= size;
          if (a.stats_.cachedBytes + size <= kCacheBytes) {
            a.cache_[size].push_back(p);
            a.stats_.cachedBytes += size;
            keep = true;
          }
        }
      }
      if (ours) {
        if (!keep) xcclMemFree(p);
        return;
      }
    }
    a.fallbackRaw_(p);
  }

  std::mutex mu_;
  bool installed_ = false;
  int depth_ = 0;
  size_t minBytes_ = 0;
  c10::Allocator* fallback_ = nullptr;
  c10::DeleterFnPtr fallbackRaw_ = nullptr;  // set once, before anything is handed out
  std::atomic<size_t> liveCount_{0};         // our blocks alive: 0 = every free is fallback's
  std::unordered_map<void*, size_t> live_;
  std::map<size_t, std::vector<void*>> cache_;
  Stats stats_;
};

}  // namespace

void bindPeerMemory(py::module& m) {
  m.def(
      "_peer_memory_begin", [](size_t minBytes) { PeerAllocator::get().begin(minBytes); },
      py::arg("min_bytes"));
  m.def("_peer_memory_end", [] { PeerAllocator::get().end(); });
  m.def("_peer_memory_stats", [] { return PeerAllocator::get().stats(); });
}

}  // namespace torch_xccl
