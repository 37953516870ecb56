#include "connection.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>

#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "device/device.h"

namespace xccl {
namespace shm {

// Bytes in each shared-memory ring (one per direction per pair); a multiple of 64.
XCCL_PARAM(ShmBuffsize, "SHM_BUFFSIZE", 1 << 20)

namespace {

constexpr uint64_t kMagic = 0x58434c4c53484d31ull;  // "XCLLSHM1"
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 4096;  // the ring starts page-aligned
constexpr size_t kMaxSecret = 128;
constexpr size_t kMaxRing = size_t(1) << 30;
enum Side { kCreator = 0, kOpener = 1 };

static_assert(std::atomic<uint64_t>::is_always_lock_free, "ring counters must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "closed flags must be lock-free");

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t secretLen;
  uint64_t ringBytes;
  int32_t creatorPid, creatorRank, openerRank, pad;
  unsigned char secret[kMaxSecret];
  alignas(64) std::atomic<uint32_t> closed[2];  // indexed by Side
  alignas(64) std::atomic<uint64_t> head;       // written by the producer (creator)
  alignas(64) std::atomic<uint64_t> tail;       // written by the consumer (opener)
};
static_assert(sizeof(Header) <= kHeaderBytes, "header must fit its page");

}  // namespace

// One mapped memfd. Owns the fd and the mapping.
class Segment {
 public:
  Segment(int fd, void* base, size_t bytes) : fd_(fd), base_(base), bytes_(bytes) {}
  ~Segment() {
    munmap(base_, bytes_);
    ::close(fd_);
  }
  Header* header() const { return static_cast<Header*>(base_); }
  char* ring() const { return static_cast<char*>(base_) + kHeaderBytes; }
  size_t ringBytes() const { return bytes_ - kHeaderBytes; }
  int fd() const { return fd_; }

 private:
  int fd_;
  void* base_;
  size_t bytes_;
};

OutgoingRing::OutgoingRing(int rank, int peer, const std::string& secret) {
  int64_t ring = xcclParamShmBuffsize();
  XCCL_CHECK(ring >= 256 && ring % 64 == 0 && static_cast<uint64_t>(ring) <= kMaxRing,
             "XCCL_SHM_BUFFSIZE=", ring, " must be a multiple of 64 between 256 and ", kMaxRing);
  XCCL_CHECK(secret.size() <= kMaxSecret, "secret of ", secret.size(), " bytes is too long");
  size_t bytes = kHeaderBytes + static_cast<size_t>(ring);
  int fd = memfd_create("xccl-shm-ring", MFD_CLOEXEC);
  XCCL_SYSCHECK(fd, "memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    throw IoError(strCat("rank ", rank, ": ftruncate of a ", bytes,
                         "-byte SHM ring failed: ", errnoString(err)));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    throw IoError(strCat("rank ", rank, ": mmap of SHM ring failed: ", errnoString(err)));
  }
  seg_ = std::make_unique<Segment>(fd, base, bytes);
  // The pages are zero (fresh memfd), so the atomics start at 0/false; construct them
  // formally all the same.
  Header* h = new (base) Header();
  h->magic = kMagic;
  h->version = kVersion;
  h->ringBytes = static_cast<uint64_t>(ring);
  h->creatorPid = static_cast<int32_t>(getpid());
  h->creatorRank = rank;
  h->openerRank = peer;
  h->secretLen = static_cast<uint32_t>(secret.size());
  std::memcpy(h->secret, secret.data(), secret.size());
}

OutgoingRing::~OutgoingRing() = default;

std::string OutgoingRing::describe() const {
  return strCat(getpid(), " ", seg_->fd(), " ", seg_->ringBytes());
}

std::unique_ptr<Segment> OutgoingRing::take() { return std::move(seg_); }

namespace {

// Opens and validates the peer's ring. `desc` comes from the store: parse it strictly.
std::unique_ptr<Segment> openPeerRing(int rank, int peer, const std::string& desc,
                                      const std::string& secret) {
  long pid = 0, fd = 0;
  unsigned long long ring = 0;
  char extra = 0;
  if (std::sscanf(desc.c_str(), "%ld %ld %llu %c", &pid, &fd, &ring, &extra) != 3 || pid <= 0 ||
      fd < 0 || ring == 0 || ring > kMaxRing) {
    throw RemoteError(strCat("rank ", rank, ": malformed SHM descriptor from rank ", peer, ": '",
                             desc.substr(0, 64), "'"));
  }
  std::string path = strCat("/proc/", pid, "/fd/", fd);
  int sfd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (sfd < 0) {
    throw IoError(strCat("rank ", rank, ": cannot open rank ", peer, "'s SHM ring ", path, ": ",
                         errnoString(errno), " (set XCCL_SHM_DISABLE=1 to use TCP)"));
  }
  struct stat st {};
  size_t bytes = kHeaderBytes + ring;
  if (fstat(sfd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    ::close(sfd);
    throw RemoteError(
        strCat("rank ", rank, ": rank ", peer, "'s SHM ring ", path, " has the wrong size"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    ::close(sfd);
    throw IoError(strCat("rank ", rank, ": mmap of ", path, " failed: ", errnoString(err)));
  }
  auto seg = std::make_unique<Segment>(sfd, base, bytes);
  const Header* h = seg->header();
  if (h->magic != kMagic || h->version != kVersion || h->ringBytes != ring ||
      h->creatorRank != peer || h->openerRank != rank || h->creatorPid != pid) {
    throw RemoteError(strCat("refused SHM ring from rank ", peer, " (", path,
                             "): bad header (not ours, or another version)"));
  }
  std::string theirs(reinterpret_cast<const char*>(h->secret),
                     std::min<size_t>(h->secretLen, kMaxSecret));
  unsigned char diff = theirs.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < theirs.size() && i < secret.size(); ++i) diff |= theirs[i] ^ secret[i];
  if (diff != 0) {
    XCCL_WARN(SHM, "refused SHM ring from rank ", peer, " (", path, "): bad secret");
    throw RemoteError(strCat("rank ", rank, ": refused SHM ring from rank ", peer, ": bad secret"));
  }
  return seg;
}

// True when process `pid` is gone or a zombie (killed, not yet reaped).
bool processDead(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream f(strCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(f, stat)) return true;
  size_t paren = stat.rfind(')');  // the command name may contain spaces and parens
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

class ShmConnection : public Connection {
 public:
  ShmConnection(int rank, int peer, int peerPid, std::unique_ptr<Segment> send,
                std::unique_ptr<Segment> recv, Device& device)
      : rank_(rank),
        peer_(peer),
        peerPid_(peerPid),
        send_(std::move(send)),
        recv_(std::move(recv)),
        device_(device) {
    device_.registerStaging(send_->ring(), send_->ringBytes());
    device_.registerStaging(recv_->ring(), recv_->ringBytes());
    sendHead_ = send_->header()->head.load(std::memory_order_relaxed);
    recvTail_ = recv_->header()->tail.load(std::memory_order_relaxed);
  }

  ~ShmConnection() override {
    close();
    device_.unregisterStaging(send_->ring());
    device_.unregisterStaging(recv_->ring());
  }

  size_t reserveSend(void** window, size_t want) override {
    const size_t size = send_->ringBytes();
    uint64_t tail = send_->header()->tail.load(std::memory_order_acquire);
    uint64_t used = sendHead_ - tail;
    if (used > size) corrupt("send", used);
    size_t pos = static_cast<size_t>(sendHead_ % size);
    size_t n = std::min({want, size - static_cast<size_t>(used), size - pos});
    *window = send_->ring() + pos;
    reserved_ = n;
    return n;
  }

  void commitSend(size_t bytes) override {
    XCCL_CHECK(bytes <= reserved_, "commitSend(", bytes, ") exceeds the reserved window of ",
               reserved_);
    reserved_ -= bytes;
    sendHead_ += bytes;
    send_->header()->head.store(sendHead_, std::memory_order_release);
  }

  size_t peekRecv(const void** window) override {
    const size_t size = recv_->ringBytes();
    uint64_t head = recv_->header()->head.load(std::memory_order_acquire);
    uint64_t avail = head - recvTail_;
    if (avail > size) corrupt("receive", avail);
    size_t pos = static_cast<size_t>(recvTail_ % size);
    size_t n = std::min(static_cast<size_t>(avail), size - pos);
    *window = recv_->ring() + pos;
    peeked_ = n;
    return n;
  }

  void consumeRecv(size_t bytes) override {
    XCCL_CHECK(bytes <= peeked_, "consumeRecv(", bytes, ") exceeds the peeked window of ", peeked_);
    peeked_ -= bytes;
    recvTail_ += bytes;
    recv_->header()->tail.store(recvTail_, std::memory_order_release);
  }

  bool progress() override { return false; }  // the peer writes straight into our mapping

  std::string peerGone() override {
    if (peerClosedFlag()) return "closed its end";
    if (peerPid_ != static_cast<int>(getpid()) && processDead(peerPid_)) {
      return strCat("process ", peerPid_, " died");
    }
    return "";
  }

  void close() override {
    if (closed_.exchange(true)) return;
    send_->header()->closed[kCreator].store(1, std::memory_order_release);
    recv_->header()->closed[kOpener].store(1, std::memory_order_release);
  }

  const char* kind() const override { return "SHM"; }
  int peer() const override { return peer_; }

 private:
  bool peerClosedFlag() const {
    return send_->header()->closed[kOpener].load(std::memory_order_acquire) != 0 ||
           recv_->header()->closed[kCreator].load(std::memory_order_acquire) != 0;
  }

  [[noreturn]] void corrupt(const char* dir, uint64_t value) const {
    throw RemoteError(strCat("rank ", rank_, ": SHM ", dir, " ring with rank ", peer_,
                             " is corrupt (", value, " bytes in flight)"));
  }

  int rank_, peer_, peerPid_;
  std::unique_ptr<Segment> send_, recv_;
  Device& device_;
  uint64_t sendHead_ = 0, recvTail_ = 0;  // our own counters, cached
  size_t reserved_ = 0, peeked_ = 0;
  std::atomic<bool> closed_{false};
};

}  // namespace

std::unique_ptr<Connection> makeConnection(int rank, int peer, int peerPid, OutgoingRing& out,
                                           const std::string& peerDesc, const std::string& secret,
                                           Device& device) {
  std::unique_ptr<Segment> recv = openPeerRing(rank, peer, peerDesc, secret);
  XCCL_INFO(SHM, "rank ", rank, " <- ", peer, ": mapped ", recv->ringBytes(), "-byte ring of pid ",
            peerPid);
  return std::make_unique<ShmConnection>(rank, peer, peerPid, out.take(), std::move(recv), device);
}

}  // namespace shm
}  // namespace xccl
