#include "arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <random>

#include "common/shared_memory.h"
#include "status.h"

namespace xdev {

namespace {
constexpr size_t kPage = 4096;
constexpr size_t kPunchMin = 4u << 20;  // freed ranges this long give their pages back
constexpr size_t kMaxSegment = size_t(1) << 40;

size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

uint64_t randomId() {
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::lock_guard<std::mutex> g(mu);
  uint64_t id = 0;
  while (id == 0) id = gen();
  return id;
}
}  // namespace

Arena::~Arena() {
  for (auto& s : segments_) {
    munmap(s->base, s->bytes);
    ::close(s->fd);
  }
}

void* Arena::carve(Segment& s, size_t bytes) {
  for (auto it = s.free.begin(); it != s.free.end(); ++it) {
    if (it->second < bytes) continue;
    const size_t offset = it->first, length = it->second;
    s.free.erase(it);
    if (length > bytes) s.free[offset + bytes] = length - bytes;
    return s.base + offset;
  }
  return nullptr;
}

void* Arena::alloc(size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& s : segments_) {
    if (void* p = carve(*s, bytes)) return p;
  }
  const size_t size = roundUp(std::max(bytes, segmentBytes_), 2u << 20);
  if (size > kMaxSegment) throw std::bad_alloc();
  xccl::SharedMapping m;
  try {
    m = xccl::createSharedMapping(size, "xdev-device-memory");
  } catch (const std::exception&) {
    throw std::bad_alloc();
  }
  madvise(m.base, size, MADV_DONTFORK);
  auto seg =
      std::make_unique<Segment>(Segment{randomId(), m.fd, static_cast<char*>(m.base), size, {}});
  seg->free[0] = size;
  void* p = carve(*seg, bytes);
  segments_.push_back(std::move(seg));
  return p;
}

void Arena::punch(Segment& s, size_t offset, size_t length) {
  // Whole pages strictly inside the free range: the neighbours may share its edge pages.
  const size_t first = roundUp(offset, kPage), last = (offset + length) / kPage * kPage;
  if (last <= first || last - first < kPunchMin) return;
  fallocate(s.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first),
            static_cast<off_t>(last - first));
}

void Arena::release(void* p, size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  char* c = static_cast<char*>(p);
  for (auto& s : segments_) {
    if (c < s->base || c >= s->base + s->bytes) continue;
    size_t offset = static_cast<size_t>(c - s->base), length = bytes;
    auto next = s->free.lower_bound(offset);
    if (next != s->free.end() && offset + length == next->first) {  // merge the one after
      length += next->second;
      next = s->free.erase(next);
    }
    if (next != s->free.begin()) {  // merge the one before
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        length += prev->second;
        s->free.erase(prev);
      }
    }
    s->free[offset] = length;
    punch(*s, offset, length);
    return;
  }
}

bool Arena::locate(const void* p, ArenaRef* out) {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> g(mu_);
  for (auto& s : segments_) {
    if (c < s->base || c >= s->base + s->bytes) continue;
    *out = ArenaRef{s->id, s->fd, s->bytes, static_cast<uint64_t>(c - s->base)};
    return true;
  }
  return false;
}

void* Arena::byteOf(const ArenaRef& ref) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& s : segments_) {
    if (s->id == ref.segmentId && s->fd == ref.fd && s->bytes == ref.segmentBytes &&
        ref.offset < s->bytes) {
      return s->base + ref.offset;
    }
  }
  return nullptr;
}

PeerSegments::~PeerSegments() {
  for (auto& [key, m] : mapped_) {
    munmap(m.base, m.bytes);
    ::close(m.fd);
  }
}

void* PeerSegments::open(int ownerPid, const ArenaRef& ref, std::pair<void*, size_t>* fresh) {
  XDEV_REQUIRE(ownerPid > 0 && ref.segmentId != 0 && ref.fd >= 0 && ref.segmentBytes > 0 &&
                   ref.segmentBytes <= kMaxSegment && ref.offset < ref.segmentBytes,
               xdevErrorInvalidValue, "malformed IPC memory handle (segment ", ref.segmentId,
               ", fd ", ref.fd, ", ", ref.segmentBytes, " bytes, offset ", ref.offset, ")");
  std::lock_guard<std::mutex> g(mu_);
  const auto key = std::make_pair(ownerPid, ref.segmentId);
  auto it = mapped_.find(key);
  if (it == mapped_.end()) {
    xccl::SharedMapping m;
    try {
      m = xccl::openSharedMapping(ownerPid, ref.fd, ref.segmentBytes,
                                  strCat("process ", ownerPid, "'s device memory"));
    } catch (const std::exception& e) {
      throw Failure(xdevErrorInvalidResourceHandle, e.what());
    }
    it = mapped_.emplace(key, Mapped{m.fd, m.base, m.bytes}).first;
    if (fresh != nullptr) *fresh = {m.base, m.bytes};
  }
  XDEV_REQUIRE(it->second.bytes == ref.segmentBytes, xdevErrorInvalidValue,
               "IPC memory handle of segment ", ref.segmentId, " with ", ref.segmentBytes,
               " bytes, mapped with ", it->second.bytes);
  return static_cast<char*>(it->second.base) + ref.offset;
}

}  // namespace xdev
