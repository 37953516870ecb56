#include "doorbell.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <new>

#include "common/error.h"

namespace xccl {
namespace shm {

namespace {
constexpr size_t kPageBytes = 4096;
constexpr uint64_t kBellMagic = 0x58434c4c42454c31ull;  // "XCLLBEL1"

// Shared (not FUTEX_PRIVATE): the word lives in a mapping other processes share.
long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const struct timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}
}  // namespace

struct BellPage {
  uint64_t magic;
  alignas(64) std::atomic<uint32_t> seq;
  alignas(64) std::atomic<uint32_t> sleepers;
};
static_assert(sizeof(BellPage) <= kPageBytes, "a bell fits its page");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be lock-free");

std::unique_ptr<Doorbell> Doorbell::create() {
  SharedMapping m = createSharedMapping(kPageBytes, "xccl-doorbell");
  auto* p = new (m.base) BellPage();
  p->magic = kBellMagic;
  return std::unique_ptr<Doorbell>(new Doorbell(m));
}

std::unique_ptr<Doorbell> Doorbell::open(const std::string& desc, int rank, int peer) {
  long pid = 0, fd = 0;
  char extra = 0;
  if (std::sscanf(desc.c_str(), "%ld %ld %c", &pid, &fd, &extra) != 2 || pid <= 0 || fd < 0) {
    throw RemoteError(strCat("rank ", rank, ": malformed doorbell from rank ", peer, ": '",
                             desc.substr(0, 64), "'"));
  }
  SharedMapping m =
      openSharedMapping(pid, fd, kPageBytes, strCat("rank ", rank, ": rank ", peer, "'s doorbell"));
  std::unique_ptr<Doorbell> bell(new Doorbell(m));
  if (bell->page()->magic != kBellMagic) {
    throw RemoteError(
        strCat("rank ", rank, ": rank ", peer, "'s doorbell is not an xccl doorbell"));
  }
  return bell;
}

Doorbell::~Doorbell() { closeSharedMapping(map_); }

std::string Doorbell::describe() const { return strCat(getpid(), " ", map_.fd); }

BellPage* Doorbell::page() const { return static_cast<BellPage*>(map_.base); }

uint32_t Doorbell::prepare() {
  const uint32_t seen = page()->seq.load(std::memory_order_acquire);
  page()->sleepers.fetch_add(1, std::memory_order_seq_cst);
  return seen;
}

void Doorbell::cancel() { page()->sleepers.fetch_sub(1, std::memory_order_relaxed); }

void Doorbell::sleep(uint32_t seen, int64_t timeoutUs) {
  struct timespec ts;
  ts.tv_sec = timeoutUs / 1000000;
  ts.tv_nsec = (timeoutUs % 1000000) * 1000;
  // EAGAIN (rung since prepare), EINTR and ETIMEDOUT all mean: look again.
  futex(&page()->seq, FUTEX_WAIT, seen, &ts);
  page()->sleepers.fetch_sub(1, std::memory_order_relaxed);
}

void Doorbell::ring() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  BellPage* p = page();
  if (p->sleepers.load(std::memory_order_relaxed) == 0) return;
  p->seq.fetch_add(1, std::memory_order_release);
  futex(&p->seq, FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace shm
}  // namespace xccl
