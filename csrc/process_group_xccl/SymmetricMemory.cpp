// SymmetricMemory.cpp — the xdev symmetric-memory allocator, its rendezvous and the signals
// (SymmetricMemory.hpp says what each promises).
#include "SymmetricMemory.hpp"

#include <c10/core/DeviceGuard.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "DeviceStreams.hpp"
#include "xdev_runtime.h"

namespace torch_xccl {
namespace {

namespace sm = c10d::symmetric_memory;
using SymmClock = std::chrono::steady_clock;

constexpr size_t kDefaultSignalTimeoutMs = 600 * 1000;  // timeout_ms == 0
constexpr auto kLivenessPeriod = std::chrono::milliseconds(50);
// Past torch's signal pad (which users may use as they like) each pad has one more line: a
// word this rank sets when one of its operations on the memory failed, so that a peer
// waiting for its signal fails at once instead of at the timeout.
constexpr size_t kFailLine = 64;

void symmCheck(xdevError_t e, const char* what) {
  TORCH_CHECK(e == xdevSuccess, "symm_mem (xdev): ", what, " failed: ", xdevGetErrorString(e), " (",
              xdevGetLastErrorMessage(), ")");
}

// What makes two processes one host to xdev's IPC (the owner's segment is opened through
// /proc/<pid>): the same machine (boot id) and pid namespace; the host name and network
// namespace as well, so that a rank libxccl counts on another host is on another host here.
uint64_t symmHostKey() {
  auto firstLine = [](const char* path) {
    std::ifstream f(path);
    std::string s;
    std::getline(f, s);
    return s;
  };
  auto ns = [](const char* kind) {
    char b[64] = {0};
    ssize_t n = readlink((std::string("/proc/self/ns/") + kind).c_str(), b, sizeof(b) - 1);
    return n > 0 ? std::string(b, static_cast<size_t>(n)) : std::string();
  };
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::hash<std::string>{}(std::string(host) + "/" +
                                  firstLine("/proc/sys/kernel/random/boot_id") + "/" + ns("net") +
                                  "/" + ns("pid"));
}

// A process that exited (or is a zombie nobody reaped yet) sends no more signals.
bool symmProcessGone(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z' ||
         line[close + 2] == 'X';
}

// One rank's record in the rendezvous (all ranks run the same library on one host or more).
struct SymmRecord {
  char magic[8];
  int64_t pid;
  int64_t device;
  uint64_t host;
  uint64_t bytes;
  uint64_t offset;
  uint64_t padBytes;
  xdevIpcMemHandle_t buf;
  xdevIpcMemHandle_t pad;
};
constexpr char kSymmMagic[8] = {'X', 'S', 'Y', 'M', 'M', '0', '1', 0};

template <typename T>
std::vector<T> allgatherPod(c10d::ProcessGroup& pg, const T& mine) {
  at::Tensor in = at::empty({static_cast<int64_t>(sizeof(T))}, at::kByte);
  std::memcpy(in.data_ptr(), &mine, sizeof(T));
  std::vector<std::vector<at::Tensor>> outs(1);
  for (int r = 0; r < pg.getSize(); ++r) outs[0].push_back(at::empty_like(in));
  std::vector<at::Tensor> ins{in};
  pg.allgather(outs, ins)->wait();
  std::vector<T> all(outs[0].size());
  for (size_t r = 0; r < all.size(); ++r) std::memcpy(&all[r], outs[0][r].data_ptr(), sizeof(T));
  return all;
}

class XdevSymmAllocator final : public sm::SymmetricMemoryAllocator {
 public:
  void* alloc(size_t size, int device_idx, const std::optional<std::string>&) override {
    c10::DeviceGuard guard(
        c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device_idx)));
    auto seg = std::make_shared<SymmSegment>();
    seg->device = device_idx;
    seg->bytes = size;
    seg->padBytes = sm::get_signal_pad_size();
    symmCheck(xdevMalloc(&seg->buf, std::max<size_t>(size, 1)), "xdevMalloc (buffer)");
    symmCheck(xdevMalloc(&seg->pad, seg->padBytes + kFailLine), "xdevMalloc (signal pad)");
    std::memset(seg->pad, 0, seg->padBytes + kFailLine);  // xdev memory is host memory
    std::lock_guard<std::mutex> g(mu_);
    blocks_[seg->buf] = Entry{seg, {}};
    return seg->buf;
  }

  // The memory itself goes with its last holder (SymmSegment): a SymmetricMemory made from
  // it may outlive the tensor.
  void free(void* ptr) override {
    Entry gone;  // dropped outside the lock
    std::lock_guard<std::mutex> g(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return;
    gone = std::move(it->second);
    blocks_.erase(it);
  }

  size_t get_alloc_size(void* ptr) override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = find(ptr);
    TORCH_CHECK(it != blocks_.end(), "symm_mem (xdev): ", ptr,
                " is not symmetric memory (allocate it with symm_mem.empty)");
    return it->second.seg->bytes;
  }

  c10::intrusive_ptr<sm::SymmetricMemory> rendezvous(
      void* ptr, const std::optional<std::string>& group_name) override {
    TORCH_CHECK(group_name.has_value(), "symm_mem (xdev): rendezvous needs a group");
    return rendezvousAt(ptr, *group_name);
  }

  c10::intrusive_ptr<XdevSymmetricMemory> rendezvousAt(void* ptr, const std::string& group) {
    std::shared_ptr<SymmSegment> seg;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = find(ptr);
      TORCH_CHECK(it != blocks_.end(), "symm_mem (xdev): the tensor at ", ptr,
                  " is not in symmetric memory (allocate it with symm_mem.empty(..., "
                  "device=\"xdev\"))");
      auto done = it->second.byGroup.find(group);
      if (done != it->second.byGroup.end()) return done->second;
      seg = it->second.seg;
    }
    auto made = exchange(seg, static_cast<char*>(ptr) - static_cast<char*>(seg->buf), group);
    std::lock_guard<std::mutex> g(mu_);
    auto it = blocks_.find(seg->buf);
    if (it != blocks_.end()) it->second.byGroup[group] = made;
    return made;
  }

  bool has_multicast_support(int) override { return false; }
  c10::DeviceType supported_device_type() override { return c10::DeviceType::PrivateUse1; }
  std::string name() override { return "XCCL"; }
  // A virtual of torch 2.13's base (absent from 2.11's): no `override`, so both compile.
  bool has_allocation(void* ptr) {
    std::lock_guard<std::mutex> g(mu_);
    return find(ptr) != blocks_.end();
  }

 private:
  struct Entry {
    std::shared_ptr<SymmSegment> seg;
    std::map<std::string, c10::intrusive_ptr<XdevSymmetricMemory>> byGroup;
  };

  // The allocation holding ptr (interior pointers too). Caller holds mu_.
  std::map<void*, Entry>::iterator find(void* ptr) {
    auto it = blocks_.upper_bound(ptr);
    if (it == blocks_.begin()) return blocks_.end();
    --it;
    const auto off = static_cast<char*>(ptr) - static_cast<char*>(it->first);
    return off < static_cast<ptrdiff_t>(std::max<size_t>(it->second.seg->bytes, 1)) ? it
                                                                                    : blocks_.end();
  }

  // The collective part: every rank's record, checked alike everywhere, then the handles of
  // this host's ranks opened; a second exchange so that all ranks fail or succeed together
  // and none returns (and may free) before every peer has mapped it.
  c10::intrusive_ptr<XdevSymmetricMemory> exchange(const std::shared_ptr<SymmSegment>& seg,
                                                   size_t offset, const std::string& group) {
    auto pg = c10d::resolve_process_group(group);
    const int me = pg->getRank();
    SymmRecord mine{};
    std::memcpy(mine.magic, kSymmMagic, sizeof(kSymmMagic));
    mine.pid = getpid();
    mine.device = seg->device;
    mine.host = symmHostKey();
    mine.bytes = seg->bytes;
    mine.offset = offset;
    mine.padBytes = seg->padBytes;
    symmCheck(xdevIpcGetMemHandle(&mine.buf, seg->buf), "xdevIpcGetMemHandle (buffer)");
    symmCheck(xdevIpcGetMemHandle(&mine.pad, seg->pad), "xdevIpcGetMemHandle (signal pad)");
    const std::vector<SymmRecord> all = allgatherPod(*pg, mine);
    for (size_t r = 0; r < all.size(); ++r) {
      const SymmRecord& o = all[r];
      TORCH_CHECK(std::memcmp(o.magic, kSymmMagic, sizeof(kSymmMagic)) == 0,
                  "symm_mem (xdev): rank ", r, " of group ", group,
                  " sent no xdev symmetric-memory record (is its tensor on xdev?)");
      TORCH_CHECK(o.bytes == mine.bytes && o.offset == mine.offset, "symm_mem (xdev): group ",
                  group, ": rank ", me, " has ", mine.bytes, " bytes at offset ", mine.offset,
                  ", rank ", r, " has ", o.bytes, " at offset ", o.offset,
                  " (every rank allocates the same size)");
      TORCH_CHECK(o.padBytes == mine.padBytes,
                  "symm_mem (xdev): signal pads differ in size: ", mine.padBytes, " bytes here, ",
                  o.padBytes, " on rank ", r);
    }
    std::vector<XdevSymmetricMemory::Rank> ranks(all.size());
    std::string failed;
    {
      c10::DeviceGuard guard(
          c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(seg->device)));
      for (size_t r = 0; r < all.size() && failed.empty(); ++r) {
        ranks[r].pid = static_cast<int>(all[r].pid);
        if (all[r].host != mine.host) continue;
        void* b = nullptr;
        void* p = nullptr;
        if (xdevIpcOpenMemHandle(&b, all[r].buf, 0) != xdevSuccess ||
            xdevIpcOpenMemHandle(&p, all[r].pad, 0) != xdevSuccess) {
          failed = std::string("cannot map rank ") + std::to_string(r) +
                   "'s memory: " + xdevGetLastErrorMessage();
          xdevGetLastError();
        }
        ranks[r].buf = b;
        ranks[r].pad = p;
      }
    }
    struct Ok {
      int32_t ok;
    };
    const std::vector<Ok> oks = allgatherPod(*pg, Ok{failed.empty() ? 1 : 0});
    TORCH_CHECK(failed.empty(), "symm_mem (xdev): rank ", me, ": ", failed);
    for (size_t r = 0; r < oks.size(); ++r) {
      TORCH_CHECK(oks[r].ok == 1, "symm_mem (xdev): rendezvous on ", group, " failed on rank ", r,
                  " (it could not map a peer's memory; its log says which)");
    }
    return c10::make_intrusive<XdevSymmetricMemory>(seg, std::move(ranks), me, offset, group);
  }

  std::mutex mu_;
  std::map<void*, Entry> blocks_;
};

c10::intrusive_ptr<XdevSymmAllocator>& symmAllocator() {
  static c10::intrusive_ptr<XdevSymmAllocator> a = c10::make_intrusive<XdevSymmAllocator>();
  return a;
}

// Registered when the extension loads: torch asks it for PrivateUse1 tensors, and
// symm_mem.set_backend("XCCL") / get_backend("xdev") know it by name.
[[maybe_unused]] const bool kSymmRegistered = [] {
  sm::register_allocator(c10::DeviceType::PrivateUse1, symmAllocator());
  sm::register_availability("XCCL", symmAllocator());
  return true;
}();

void symmTrampoline(void* arg) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  (*fn)();
}

}  // namespace

SymmSegment::~SymmSegment() {
  if (sm::is_finalizing()) return;
  c10::DeviceGuard guard(
      c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  xdevFree(buf);
  xdevFree(pad);
}

XdevSymmetricMemory::XdevSymmetricMemory(std::shared_ptr<SymmSegment> own, std::vector<Rank> ranks,
                                         int rank, size_t offset, std::string group)
    : own_(std::move(own)),
      ranks_(std::move(ranks)),
      rank_(rank),
      offset_(offset),
      group_(std::move(group)) {
  for (const Rank& r : ranks_) {
    bufs_.push_back(r.buf);
    pads_.push_back(r.pad);
  }
  c10::DeviceGuard guard(get_device());
  const size_t n = ranks_.size() * sizeof(void*);
  symmCheck(xdevMalloc(reinterpret_cast<void**>(&bufsDev_), n), "xdevMalloc (pointer array)");
  symmCheck(xdevMalloc(reinterpret_cast<void**>(&padsDev_), n), "xdevMalloc (pointer array)");
  std::memcpy(bufsDev_, bufs_.data(), n);
  std::memcpy(padsDev_, pads_.data(), n);
}

XdevSymmetricMemory::~XdevSymmetricMemory() {
  if (sm::is_finalizing()) return;
  c10::DeviceGuard guard(get_device());
  xdevFree(bufsDev_);
  xdevFree(padsDev_);
}

c10::Device XdevSymmetricMemory::get_device() {
  return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(own_->device));
}

bool XdevSymmetricMemory::world_within_direct_access() {
  for (const Rank& r : ranks_) {
    if (r.buf == nullptr) return false;
  }
  return true;
}

// The task holds a reference to this object until it ran (so callers may capture `this`);
// what fails on the stream marks this rank's fail word first (see kFailLine).
void XdevSymmetricMemory::enqueue(std::function<void()> fn) {
  auto self = c10::intrusive_ptr<XdevSymmetricMemory>::reclaim_copy(this);
  enqueueOnCurrentStream(get_device(), [self, fn = std::move(fn)] {
    try {
      fn();
    } catch (...) {
      __atomic_store_n(self->failedWord(self->rank_), 1u, __ATOMIC_RELEASE);
      throw;
    }
  });
}

void enqueueOnCurrentStream(const c10::Device& d, std::function<void()> fn) {
  c10::DeviceGuard guard(d);
  auto* task = new std::function<void()>(std::move(fn));
  const xdevError_t e = xdevLaunchHostFunc(
      static_cast<xdevStream_t>(nativeStream(currentStream(d))), &symmTrampoline, task);
  if (e != xdevSuccess) delete task;
  symmCheck(e, "xdevLaunchHostFunc");
}

uint32_t* XdevSymmetricMemory::slot(int owner, int channel, int src) {
  return static_cast<uint32_t*>(ranks_[owner].pad) + static_cast<size_t>(channel) * ranks_.size() +
         src;
}

void XdevSymmetricMemory::checkChannel(const char* what, int channel, int peer) {
  const int world = get_world_size();
  TORCH_CHECK(peer >= 0 && peer < world, "symm_mem (xdev) ", what, ": rank ", peer,
              " is not in a group of ", world);
  TORCH_CHECK(channel >= 0 &&
                  (static_cast<size_t>(channel) + 1) * world * sizeof(uint32_t) <= own_->padBytes,
              "symm_mem (xdev) ", what, ": channel ", channel, " does not fit a signal pad of ",
              own_->padBytes, " bytes for ", world, " ranks");
  TORCH_CHECK(ranks_[peer].pad != nullptr, "symm_mem (xdev) ", what, ": rank ", peer,
              " is on another host; signals reach the ranks of this host only");
}

namespace {

// Spins until `done`, failing when the peer's operation failed (*peerFailed), its process
// `pid` exits, or the time is up.
void symmSpin(const std::function<bool()>& done, const uint32_t* peerFailed, int pid,
              size_t timeoutMs, const std::function<std::string()>& what) {
  const auto start = SymmClock::now();
  auto nextLook = start + kLivenessPeriod;
  const auto limit =
      std::chrono::milliseconds(timeoutMs == 0 ? kDefaultSignalTimeoutMs : timeoutMs);
  for (uint64_t i = 0;; ++i) {
    if (done()) return;
    if (i < 256) continue;
    if (__atomic_load_n(peerFailed, __ATOMIC_ACQUIRE) != 0) {
      throw std::runtime_error(
          "symm_mem (xdev): " + what() +
          ": that rank's operation on this memory failed (its error says why)");
    }
    std::this_thread::yield();
    const auto now = SymmClock::now();
    if (now < nextLook) continue;
    nextLook = now + kLivenessPeriod;
    // Plain exceptions on the stream worker: their text becomes the stream's error as is.
    if (symmProcessGone(pid)) {
      throw std::runtime_error("symm_mem (xdev): " + what() + ": process " + std::to_string(pid) +
                               " exited");
    }
    if (now - start >= limit) {
      throw std::runtime_error("symm_mem (xdev): " + what() + ": no signal after " +
                               std::to_string(limit.count()) + " ms (timeout_ms" +
                               (timeoutMs == 0 ? " 0 means 600 s" : "") + ")");
    }
  }
}

}  // namespace

// Spins until this slot goes from `from` to `to` (compare-and-swap), `pid` being the rank
// whose signal it waits on.
void XdevSymmetricMemory::swapNow(uint32_t* slot, uint32_t from, uint32_t to, int peer,
                                  size_t timeoutMs, const std::function<std::string()>& what) {
  const int order = to == 1 ? __ATOMIC_RELEASE : __ATOMIC_ACQUIRE;
  symmSpin(
      [slot, from, to, order] {
        uint32_t expected = from;
        return __atomic_compare_exchange_n(slot, &expected, to, false, order, __ATOMIC_RELAXED);
      },
      failedWord(peer), ranks_[peer].pid, timeoutMs, what);
}

uint32_t* XdevSymmetricMemory::failedWord(int r) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(ranks_[r].pad) + own_->padBytes);
}

void XdevSymmetricMemory::putNow(int dst, int channel, size_t timeoutMs) {
  swapNow(slot(dst, channel, rank_), 0, 1, dst, timeoutMs, [&] {
    return "rank " + std::to_string(rank_) + " signalling rank " + std::to_string(dst) +
           " on channel " + std::to_string(channel) + " (its previous signal not consumed)";
  });
}

void XdevSymmetricMemory::waitNow(int src, int channel, size_t timeoutMs) {
  swapNow(slot(rank_, channel, src), 1, 0, src, timeoutMs, [&] {
    return "rank " + std::to_string(rank_) + " waiting for rank " + std::to_string(src) +
           "'s signal on channel " + std::to_string(channel);
  });
}

void XdevSymmetricMemory::barrierNow(int channel, size_t timeoutMs) {
  const int world = get_world_size();
  for (int k = 1; k < world; ++k) putNow((rank_ + k) % world, channel, timeoutMs);
  for (int k = 1; k < world; ++k) waitNow((rank_ - k + world) % world, channel, timeoutMs);
}

void XdevSymmetricMemory::barrier(int channel, size_t timeout_ms) {
  for (int r = 0; r < get_world_size(); ++r) checkChannel("barrier", channel, r);
  enqueue([this, channel, timeout_ms] { barrierNow(channel, timeout_ms); });
}

void XdevSymmetricMemory::put_signal(int dst_rank, int channel, size_t timeout_ms) {
  checkChannel("put_signal", channel, dst_rank);
  enqueue([this, dst_rank, channel, timeout_ms] { putNow(dst_rank, channel, timeout_ms); });
}

void XdevSymmetricMemory::wait_signal(int src_rank, int channel, size_t timeout_ms) {
  checkChannel("wait_signal", channel, src_rank);
  enqueue([this, src_rank, channel, timeout_ms] { waitNow(src_rank, channel, timeout_ms); });
}

c10::intrusive_ptr<XdevSymmetricMemory> symmetricMemoryOf(const at::Tensor& t,
                                                          const std::string& group) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
              "symm_mem (xdev): the tensor is on ", t.device(), ", not xdev");
  return symmAllocator()->rendezvousAt(t.storage().data_ptr().get(), group);
}

}  // namespace torch_xccl
