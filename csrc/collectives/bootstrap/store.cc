// In-process and callback stores, PeerInfo wire format, secrets and host identity.
#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>

#include "bootstrap_internal.h"
#include "collectives/transport/tcp/socket.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"

namespace xccl {

// Host identity override: ranks with equal ids are treated as one host (SHM between them).
XCCL_PARAM_STR(NodeId, "NODE_ID", "")

namespace {

// Values larger than this are refused: a store holds small rendezvous records.
constexpr size_t kMaxStoreValue = 64u << 20;
constexpr uint32_t kMaxPeerField = 4096;
constexpr uint32_t kMaxTopologyField = 64 << 10;  // a host's topology text

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = value;
    cv_.notify_all();
  }

  std::string get(const std::string& key, const Deadline& deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      auto it = kv_.find(key);
      if (it != kv_.end()) return it->second;
      int64_t left = deadline.remainingMs();
      if (left == 0) {
        throw Timeout(strCat("store get '", key, "' timed out after ", deadline.budgetMs(), " ms"));
      }
      // Wake up now and then even without a deadline so a missed notify cannot hang us.
      int64_t slice = left < 0 ? 100 : std::min<int64_t>(left, 100);
      cv_.wait_for(lock, std::chrono::milliseconds(slice));
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

class CallbackStore : public Store {
 public:
  CallbackStore(const xcclStore_t& store, std::string prefix)
      : store_(store), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::string& value) override {
    std::string k = prefix_ + key;
    if (store_.set(store_.ctx, k.c_str(), value.data(), value.size()) != 0) {
      throw IoError(strCat("store set '", k, "' failed (callback returned non-zero)"));
    }
  }

  std::string get(const std::string& key, const Deadline& deadline) override {
    std::string k = prefix_ + key;
    std::string buf(4096, '\0');
    for (;;) {
      size_t len = 0;
      int64_t left = deadline.remainingMs();
      int rc = store_.get(store_.ctx, k.c_str(), buf.data(), buf.size(), &len, left);
      if (rc == 1 && left >= 0) {  // a bounded wait that ran out (xcclStore_t's contract)
        throw Timeout(strCat("store get '", k, "' timed out after ", deadline.budgetMs(), " ms"));
      }
      if (rc != 0) {
        throw IoError(strCat("store get '", k,
                             "' failed: the store is unreachable (callback "
                             "returned ",
                             rc,
                             "; has the process that hosts it, usually rank 0, "
                             "exited?)"));
      }
      if (len > kMaxStoreValue) {
        throw RemoteError(strCat("store get '", k, "': value of ", len, " bytes is too large"));
      }
      if (len <= buf.size()) {
        buf.resize(len);
        return buf;
      }
      buf.assign(len, '\0');  // the key exists now: fetch it again with enough room
    }
  }

 private:
  xcclStore_t store_;
  std::string prefix_;
};

thread_local std::string tlsHostIdOverride;

std::string readFirstLine(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// Bounds-checked reader over a byte string: every accessor throws instead of overrunning.
class Reader {
 public:
  // Reads s from byte `offset` on; s must outlive the reader.
  Reader(const std::string& s, size_t offset)
      : p_(reinterpret_cast<const unsigned char*>(s.data()) + offset), left_(s.size() - offset) {}
  uint32_t u32() {
    need(4);
    uint32_t v = net::getU32(p_);
    skip(4);
    return v;
  }
  std::string str(uint32_t max = kMaxPeerField) {
    uint32_t n = u32();
    if (n > max) throw RemoteError(strCat("malformed PeerInfo: field of ", n, " bytes"));
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    skip(n);
    return s;
  }
  size_t left() const { return left_; }

 private:
  void need(size_t n) const {
    if (left_ < n) throw RemoteError("malformed PeerInfo: truncated");
  }
  void skip(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const unsigned char* p_;
  size_t left_;
};

}  // namespace

std::unique_ptr<Store> makeMemoryStore() { return std::make_unique<MemoryStore>(); }

std::unique_ptr<Store> makeCallbackStore(const xcclStore_t& store, const std::string& prefix) {
  XCCL_CHECK_ARG(store.set && store.get, "xcclStore_t needs both set and get callbacks");
  return std::make_unique<CallbackStore>(store, prefix);
}

std::string toHex(const std::string& raw) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string fromHex(const std::string& hex) {
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2) return "";
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = val(hex[i]), lo = val(hex[i + 1]);
    if (hi < 0 || lo < 0) return "";
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

std::string randomSecret() {
  std::string raw(32, '\0');
  size_t got = 0;
  while (got < raw.size()) {
    ssize_t n = getrandom(raw.data() + got, raw.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      // Old kernels without getrandom(): the same entropy through the device file.
      int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
      XCCL_SYSCHECK(fd, "open(/dev/urandom)");
      n = ::read(fd, raw.data() + got, raw.size() - got);
      ::close(fd);
      XCCL_SYSCHECK(n, "read(/dev/urandom)");
      if (n == 0) throw IoError("read(/dev/urandom) returned no bytes");
    }
    got += static_cast<size_t>(n);
  }
  return toHex(raw);
}

void setThreadHostIdOverride(const std::string& hostId) { tlsHostIdOverride = hostId; }

std::string namespaceId(const char* kind) {
  char buf[64] = {0};
  std::string link = strCat("/proc/self/ns/", kind);
  ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string(kind) + ":?";
}

std::string localHostId() {
  if (!tlsHostIdOverride.empty()) return tlsHostIdOverride;
  std::string id = xcclParamNodeId();
  if (!id.empty()) return id;
  // What makes two processes "one host" for the shared-memory transport: the same machine
  // (boot id: containers or VMs may share a hostname but not memory), the same hostname, the
  // same network namespace (two namespaces are two hosts to the network, and how tests and
  // users simulate hosts) and the same pid namespace (peers open each other's rings through
  // /proc/<pid>). A value a user can set but has no reason to: XCCL_NODE_ID still overrides.
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return strCat(host, "/", readFirstLine("/proc/sys/kernel/random/boot_id"), "/",
                namespaceId("net"), "/", namespaceId("pid"));
}

std::string serializePeerInfo(const PeerInfo& info, uint32_t flags) {
  std::string out = "XPI6";
  net::putU32(out, static_cast<uint32_t>(info.rank));
  net::putU32(out, static_cast<uint32_t>(info.pid));
  net::putU32(out, flags);
  net::putU32(out, static_cast<uint32_t>(info.device));
  for (const std::string* s : {&info.hostId, &info.hostname, &info.busId, &info.tcpAddr,
                               &info.topology, &info.service, &info.shm, &info.net}) {
    const uint32_t max = s == &info.topology ? kMaxTopologyField : kMaxPeerField;
    XCCL_CHECK(s->size() <= max, "PeerInfo field too long: ", s->size());
    net::putU32(out, static_cast<uint32_t>(s->size()));
    out += *s;
  }
  net::putU32(out, static_cast<uint32_t>(info.cores));
  return out;
}

PeerInfo parsePeerInfo(const std::string& bytes, uint32_t* flags) {
  if (bytes.size() < 4 || bytes.compare(0, 4, "XPI6") != 0) {
    throw RemoteError("malformed PeerInfo: bad magic");
  }
  Reader r(bytes, 4);
  PeerInfo info;
  info.rank = static_cast<int>(r.u32());
  info.pid = static_cast<int>(r.u32());
  uint32_t f = r.u32();
  if (flags) *flags = f;
  info.device = static_cast<int32_t>(r.u32());
  if (info.device < -1) throw RemoteError("malformed PeerInfo: device ordinal below -1");
  info.hostId = r.str();
  info.hostname = r.str();
  info.busId = r.str();
  info.tcpAddr = r.str();
  info.topology = r.str(kMaxTopologyField);
  info.service = r.str();
  info.shm = r.str();
  info.net = r.str();
  info.cores = static_cast<int>(r.u32());
  if (info.cores < 0) throw RemoteError("malformed PeerInfo: negative core count");
  if (r.left() != 0) throw RemoteError("malformed PeerInfo: trailing bytes");
  return info;
}

std::string joinPeerRecords(const std::vector<std::string>& records) {
  std::string out = "XPL1";
  net::putU32(out, static_cast<uint32_t>(records.size()));
  for (const std::string& r : records) {
    net::putU32(out, static_cast<uint32_t>(r.size()));
    out += r;
  }
  return out;
}

std::string failedPeerRecords(const std::string& why) { return "XPLF" + why; }

std::string peerRecordsFailure(const std::string& bytes) {
  if (bytes.size() < 4 || bytes.compare(0, 4, "XPLF") != 0) return "";
  return bytes.size() > 4 ? bytes.substr(4) : "(no reason given)";
}

std::vector<std::string> splitPeerRecords(const std::string& bytes, size_t expected) {
  const std::string why = peerRecordsFailure(bytes);
  if (!why.empty())
    throw RemoteError(strCat("the rank gathering the PeerInfo records gave up: ", why));
  if (bytes.size() < 4 || bytes.compare(0, 4, "XPL1") != 0) {
    throw RemoteError("malformed PeerInfo list: bad magic");
  }
  Reader r(bytes, 4);
  const uint32_t n = r.u32();
  if (n != expected) {
    throw RemoteError(strCat("PeerInfo list of ", n, " records, expected ", expected));
  }
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(r.str(kMaxStoreValue));
  if (r.left() != 0) throw RemoteError("malformed PeerInfo list: trailing bytes");
  return out;
}

}  // namespace xccl
