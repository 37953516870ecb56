// xcclMemAlloc memory on the host device: host memory the other processes of this host can
// map, so that collectives read a peer's buffer in place (single copy, as they do for xdev
// device memory; algorithms/exchange.h).
//
// One memfd per allocation: a header page, then the caller's bytes (page aligned):
//   header: "XCCLPEER" | nonce (16 random bytes) | caller's bytes (u64)
// A PeerRef names it (64 bytes): "XHM1" | fd (u32) | owner pid (i64) | memfd bytes (u64) |
// offset of the range (u64) | nonce (16) | range bytes (u64). The importer maps the whole
// memfd through /proc/<pid>/fd/<fd> once and keeps it, after checking the header's magic and
// nonce against the reference: a reference to a freed allocation whose fd number the owner
// has since reused names another nonce, and replaces the old mapping (an owner that freed a
// buffer has no operation reading it any more). Mappings of processes that have exited are
// dropped once more than kImportsKept are held.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "common/auth.h"
#include "common/error.h"
#include "common/log.h"
#include "host_device.h"

namespace xccl {

namespace {

constexpr char kRefMagic[4] = {'X', 'H', 'M', '1'};
constexpr char kHeaderMagic[8] = {'X', 'C', 'C', 'L', 'P', 'E', 'E', 'R'};
constexpr size_t kNonce = 16;
constexpr size_t kImportsKept = 256;

struct RefFields {
  uint32_t fd = 0;
  int64_t pid = 0;
  uint64_t total = 0, offset = 0, bytes = 0;
  std::string nonce;
};

void packRef(const RefFields& f, PeerRef* ref) {
  std::memset(ref->bytes, 0, sizeof(ref->bytes));
  unsigned char* p = ref->bytes;
  std::memcpy(p, kRefMagic, 4);
  std::memcpy(p + 4, &f.fd, 4);
  std::memcpy(p + 8, &f.pid, 8);
  std::memcpy(p + 16, &f.total, 8);
  std::memcpy(p + 24, &f.offset, 8);
  std::memcpy(p + 32, f.nonce.data(), kNonce);
  std::memcpy(p + 48, &f.bytes, 8);
}

bool unpackRef(const PeerRef& ref, RefFields* f) {
  const unsigned char* p = ref.bytes;
  if (std::memcmp(p, kRefMagic, 4) != 0) return false;
  std::memcpy(&f->fd, p + 4, 4);
  std::memcpy(&f->pid, p + 8, 8);
  std::memcpy(&f->total, p + 16, 8);
  std::memcpy(&f->offset, p + 24, 8);
  f->nonce.assign(reinterpret_cast<const char*>(p + 32), kNonce);
  std::memcpy(&f->bytes, p + 48, 8);
  return true;
}

size_t pageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

bool processGone(long pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

struct Peerable {
  SharedMapping m;    // the whole memfd: header page, then the caller's bytes
  std::string nonce;  // 16 random bytes, also in the header page
  size_t bytes = 0;   // what the caller asked for
};

// The process's allocations and its mappings of peers' (every host ordinal shares them).
struct Registry {
  std::mutex mu;
  std::map<const char*, Peerable> mine;                // by the caller's first byte
  std::map<std::pair<long, long>, Peerable> imported;  // peers' memfds by (pid, fd)
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: used by threads at exit
  return *r;
}

}  // namespace

void* HostDevice::allocPeerable(size_t bytes) {
  XCCL_CHECK_ARG(bytes > 0, "size 0");
  const size_t page = pageSize();
  XCCL_CHECK_ARG(bytes <= (size_t{1} << 46), "size ", bytes, " is more than this host can map");
  const size_t total = page + (bytes + page - 1) / page * page;
  Peerable a;
  a.m = createSharedMapping(total, "xccl-mem");
  a.nonce = auth::nonce();
  a.bytes = bytes;
  auto* header = static_cast<char*>(a.m.base);
  std::memcpy(header, kHeaderMagic, 8);
  std::memcpy(header + 8, a.nonce.data(), kNonce);
  const uint64_t b = bytes;
  std::memcpy(header + 8 + kNonce, &b, 8);
  char* user = header + page;
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.mine.emplace(user, std::move(a));
  return user;
}

void HostDevice::freePeerable(void* ptr) {
  SharedMapping m;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    auto it = r.mine.find(static_cast<const char*>(ptr));
    XCCL_CHECK_ARG(it != r.mine.end(), "pointer ", ptr,
                   " is not the start of memory from xcclMemAlloc (or was freed already)");
    m = it->second.m;
    r.mine.erase(it);
  }
  closeSharedMapping(m);
}

bool HostDevice::exportBuffer(const void* ptr, size_t bytes, PeerRef* ref) {
  const auto* p = static_cast<const char*>(ptr);
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.mine.upper_bound(p);
  if (it == r.mine.begin()) return false;
  --it;
  const Peerable& a = it->second;
  if (p < it->first || p + bytes > it->first + a.bytes) return false;  // not (all) inside
  RefFields f;
  f.fd = static_cast<uint32_t>(a.m.fd);
  f.pid = static_cast<int64_t>(::getpid());
  f.total = a.m.bytes;
  f.offset = static_cast<uint64_t>(p - static_cast<const char*>(a.m.base));
  f.bytes = bytes;
  f.nonce = a.nonce;
  packRef(f, ref);
  return true;
}

const void* HostDevice::importBuffer(const PeerRef& ref, int ownerPid, size_t bytes) {
  RefFields f;
  if (!unpackRef(ref, &f) || f.pid != ownerPid || f.bytes < bytes || f.offset < pageSize() ||
      f.offset > f.total || f.total - f.offset < f.bytes) {
    throw RemoteError(strCat("a peer-read frame from process ", ownerPid,
                             " names host memory it does not own, or fewer than ", bytes,
                             " bytes"));
  }
  const std::pair<long, long> key{static_cast<long>(f.pid), static_cast<long>(f.fd)};
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.imported.find(key);
  if (it != r.imported.end() && (it->second.nonce != f.nonce || it->second.m.bytes != f.total)) {
    closeSharedMapping(it->second.m);  // the owner freed that allocation: its fd is reused
    r.imported.erase(it);
    it = r.imported.end();
  }
  if (it == r.imported.end()) {
    if (r.imported.size() >= kImportsKept) {
      for (auto i = r.imported.begin(); i != r.imported.end();) {
        if (processGone(i->first.first)) {
          closeSharedMapping(i->second.m);
          i = r.imported.erase(i);
        } else {
          ++i;
        }
      }
    }
    Peerable a;
    a.m = openSharedRange(f.pid, f.fd, f.total, 0, f.total, "a peer's xcclMemAlloc memory");
    a.nonce = f.nonce;
    const auto* header = static_cast<const char*>(a.m.base);
    if (std::memcmp(header, kHeaderMagic, 8) != 0 ||
        std::memcmp(header + 8, f.nonce.data(), kNonce) != 0) {
      closeSharedMapping(a.m);
      throw RemoteError(strCat("process ", f.pid, "'s fd ", f.fd,
                               " is not the xcclMemAlloc memory its peer-read frame names (freed "
                               "while an operation read it?)"));
    }
    XCCL_TRACE(SHM, "mapped process ", f.pid, "'s xcclMemAlloc memory (fd ", f.fd, ", ", f.total,
               " bytes)");
    it = r.imported.emplace(key, std::move(a)).first;
  }
  return static_cast<const char*>(it->second.m.base) + f.offset;
}

}  // namespace xccl
