#include "arena.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/process.h"
#include "ring.h"

namespace xccl {
namespace shm {

namespace {

// A slot: the header page and the ring, rounded up to whole pages so that a peer can map its
// slot alone.
size_t strideOf(size_t ringBytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (kHeaderBytes + ringBytes + page - 1) / page * page;
}

}  // namespace

Arena::Arena(int rank, int nranks, const std::string& secret)
    : rank_(rank),
      nranks_(nranks),
      secret_(secret),
      ring_(ringBytesKnob()),
      stride_(strideOf(ring_)),
      prepared_(static_cast<size_t>(nranks), 0) {
  map_ = createSharedMapping(stride_ * static_cast<size_t>(nranks), "xccl-shm-arena");
}

Arena::~Arena() { closeSharedMapping(map_); }

void* Arena::slot(int peer) const {
  return static_cast<char*>(map_.base) + stride_ * static_cast<size_t>(peer);
}

std::string Arena::describe() const {
  return strCat(getpid(), " ", map_.fd, " ", ring_, " ", nranks_);
}

void Arena::prepare(int peer) {
  XCCL_CHECK(peer >= 0 && peer < nranks_ && peer != rank_, "Arena::prepare: bad peer ", peer);
  if (prepared_[peer]) return;
  initHeader(static_cast<Header*>(slot(peer)), rank_, peer, ring_, secret_);
  prepared_[peer] = 1;
}

std::unique_ptr<Connection> Arena::connect(int peer, int peerPid, const std::string& desc,
                                           Device& device, std::unique_ptr<Doorbell> peerBell,
                                           const Deadline& deadline,
                                           const std::atomic<bool>& abortFlag) {
  long pid = 0, fd = 0;
  unsigned long long ring = 0, slots = 0;
  char extra = 0;
  const int fields =
      std::sscanf(desc.c_str(), "%ld %ld %llu %llu %c", &pid, &fd, &ring, &slots, &extra);
  if (fields != 4 || pid <= 0 || pid != peerPid || fd < 0 || ring < 256 || ring % 64 != 0 ||
      ring > kMaxRing || slots != static_cast<unsigned long long>(nranks_)) {
    throw RemoteError(strCat("rank ", rank_, ": rank ", peer, "'s SHM arena '", desc.substr(0, 64),
                             "' is malformed or not of this communicator (", nranks_,
                             " ranks, pid ", peerPid, ")"));
  }
  const size_t stride = strideOf(ring);
  const std::string what = strCat("rank ", rank_, ": rank ", peer, "'s SHM arena");
  auto recv = std::make_unique<Segment>(openSharedRange(
      pid, fd, stride * slots, stride * static_cast<size_t>(rank_), kHeaderBytes + ring, what));
  // The peer writes its slot headers while it initialises: a rank that started its first
  // operation sooner waits here for them (its magic is written last).
  auto* magic = reinterpret_cast<std::atomic<uint64_t>*>(&recv->header()->magic);
  while (magic->load(std::memory_order_acquire) != kMagic) {
    if (abortFlag.load()) {
      throw InvalidUsage(strCat("rank ", rank_, ": aborted connecting to rank ", peer));
    }
    if (processDead(pid)) {
      throw RemoteError(strCat("rank ", rank_, ": rank ", peer, " (pid ", pid,
                               ") died before its SHM ring towards us was ready"));
    }
    if (deadline.expired()) {
      throw Timeout(strCat("rank ", rank_, ": rank ", peer, " (pid ", pid,
                           ") did not prepare its SHM ring towards us within ", deadline.budgetMs(),
                           " ms"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  checkHeader(*recv->header(), rank_, peer, pid, ring, 0, secret_);
  prepare(peer);  // at creation for every peer on this host; here for any other
  auto send = std::make_unique<Segment>(SharedMapping{-1, slot(peer), kHeaderBytes + ring_},
                                        /*owned=*/false);
  XCCL_INFO(SHM, "rank ", rank_, " <-> ", peer, ": connected on first use (", ring,
            "-byte ring of pid ", pid, ", ", ring_, "-byte ring of ours)");
  return makeShmConnection(rank_, peer, peerPid, std::move(send), std::move(recv), device,
                           std::move(peerBell));
}

void Arena::closeAll() {
  for (int p = 0; p < nranks_; ++p) {
    if (!prepared_[p]) continue;
    static_cast<Header*>(slot(p))->closed[kCreator].store(1, std::memory_order_release);
  }
}

void Arena::leaveNoteAll(const std::string& why) {
  if (why.empty()) return;
  const size_t n = std::min(why.size(), kMaxNote);
  for (int p = 0; p < nranks_; ++p) {
    if (!prepared_[p]) continue;
    Header* h = static_cast<Header*>(slot(p));
    if (h->noteBytes.load(std::memory_order_relaxed) != 0) continue;
    std::memcpy(h->note, why.data(), n);
    h->noteBytes.store(static_cast<uint32_t>(n), std::memory_order_release);
  }
}

void Arena::beatAll() {
  for (int p = 0; p < nranks_; ++p) {
    if (prepared_[p]) static_cast<Header*>(slot(p))->beat.fetch_add(1, std::memory_order_relaxed);
  }
}

size_t Arena::residentBytes() const {
  struct stat st {};
  if (fstat(map_.fd, &st) != 0) return 0;
  return static_cast<size_t>(st.st_blocks) * 512;
}

}  // namespace shm
}  // namespace xccl
