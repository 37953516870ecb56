// Store-based rendezvous that survives re-initialisation and restarts: the secret record
// (who wrote it, and whether that writer is gone), the per-secret key scope, and the set of
// secrets this process has used. Why: a store can outlive the processes that wrote to it
// (torchrun keeps its store across restarts, torch keeps a TCPStore server per port across
// destroy_process_group + init_process_group), and a rank that reads the previous
// initialisation's records would map rings through /proc/<pid>/fd of a process that is gone,
// or of a communicator that was destroyed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "bootstrap_internal.h"
#include "common/error.h"
#include "common/log.h"
#include "common/process.h"
#include "common/sha256.h"
#include "common/wait_notice.h"

namespace xccl {

namespace {

constexpr const char* kSecretKey = "secret";
constexpr size_t kSecretHex = 64;
constexpr size_t kMaxHostId = 4096;
constexpr size_t kRetiredKept = 4096;

class ScopedStore : public Store {
 public:
  ScopedStore(Store& inner, std::string prefix) : inner_(inner), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::string& value) override {
    inner_.set(prefix_ + key, value);
  }
  std::string get(const std::string& key, const Deadline& deadline) override {
    return inner_.get(prefix_ + key, deadline);
  }

 private:
  Store& inner_;
  std::string prefix_;
};

// A view of `inner` whose waits run in slices of at most 100 ms and end soon after *cancel.
class CancellableStore : public Store {
 public:
  CancellableStore(Store& inner, const std::atomic<bool>* cancel)
      : inner_(inner), cancel_(cancel) {}
  void set(const std::string& key, const std::string& value) override { inner_.set(key, value); }
  std::string get(const std::string& key, const Deadline& deadline) override {
    for (;;) {
      if (cancel_ != nullptr && cancel_->load()) {
        throw InvalidUsage(strCat("aborted waiting for '", key, "' in the store"));
      }
      const int64_t left = deadline.remainingMs();
      const int64_t slice = left < 0 ? 100 : std::min<int64_t>(left, 100);
      try {
        return inner_.get(key, Deadline::after(slice));
      } catch (const Timeout&) {
        if (deadline.expired()) throw;
      }
    }
  }

 private:
  Store& inner_;
  const std::atomic<bool>* cancel_;
};

// Decimal without sign or leading zeros ("0" alone allowed), at most `max`; -1 if not.
int64_t parseDecimal(const std::string& s, int64_t max) {
  if (s.empty() || s.size() > 19 || (s.size() > 1 && s[0] == '0')) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v <= max ? v : -1;
}

// Secrets this process has used for a communicator, as short hashes.
struct Retired {
  std::mutex mu;
  std::deque<std::string> order;
  std::set<std::string> set;
};

Retired& retired() {
  static Retired* r = new Retired();  // never destroyed: used from threads at exit
  return *r;
}

std::string secretHash(const std::string& secret) {
  auto h = sha256(secret.data(), secret.size());
  return std::string(reinterpret_cast<const char*>(h.data()), 16);
}

bool isRetired(const std::string& secret) {
  Retired& r = retired();
  std::lock_guard<std::mutex> g(r.mu);
  return r.set.count(secretHash(secret)) != 0;
}

}  // namespace

std::unique_ptr<Store> makeScopedStore(Store& inner, const std::string& prefix) {
  return std::make_unique<ScopedStore>(inner, prefix);
}

std::unique_ptr<Store> makeCancellableStore(Store& inner, const std::atomic<bool>* cancel) {
  return std::make_unique<CancellableStore>(inner, cancel);
}

std::string formatSecretRecord(const SecretRecord& rec) {
  return strCat("XSR1 ", rec.secret, " ", rec.pid, " ", rec.startTime, " ", rec.hostId);
}

SecretRecord parseSecretRecord(const std::string& bytes) {
  auto bad = [&](const char* why) {
    return RemoteError(strCat("malformed 'secret' record in the store (", why,
                              "): not written by this version of libxccl's rank 0"));
  };
  if (bytes.compare(0, 5, "XSR1 ") != 0) throw bad("bad magic");
  size_t p = 5;
  if (bytes.size() < p + kSecretHex + 1 || bytes[p + kSecretHex] != ' ') throw bad("secret");
  SecretRecord rec;
  rec.secret = bytes.substr(p, kSecretHex);
  for (char c : rec.secret) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) throw bad("secret");
  }
  p += kSecretHex + 1;
  size_t sp = bytes.find(' ', p);
  if (sp == std::string::npos) throw bad("pid");
  int64_t pid = parseDecimal(bytes.substr(p, sp - p), 0x7fffffff);
  if (pid <= 0) throw bad("pid");
  rec.pid = static_cast<int>(pid);
  p = sp + 1;
  sp = bytes.find(' ', p);
  if (sp == std::string::npos) throw bad("start time");
  rec.startTime = parseDecimal(bytes.substr(p, sp - p), INT64_MAX);
  if (rec.startTime < 0) throw bad("start time");
  rec.hostId = bytes.substr(sp + 1);
  if (rec.hostId.empty() || rec.hostId.size() > kMaxHostId) throw bad("host id");
  return rec;
}

SecretRecord localSecretRecord(const std::string& secret) {
  SecretRecord rec;
  rec.secret = secret;
  rec.pid = static_cast<int>(getpid());
  rec.startTime = std::max<int64_t>(processStartTime(rec.pid), 0);
  rec.hostId = localHostId();
  return rec;
}

std::string staleSecretReason(const SecretRecord& rec) {
  if (isRetired(rec.secret)) {
    return "this process already made a communicator with that secret: the record is left "
           "from an earlier initialisation under the same store prefix";
  }
  if (rec.hostId != localHostId()) return "";  // another host: nothing to check from here
  if (processDead(rec.pid)) {
    return strCat("it was written by process ", rec.pid, " on this host, which has exited");
  }
  if (rec.startTime != 0 && processStartTime(rec.pid) != rec.startTime) {
    return strCat("it was written by process ", rec.pid,
                  " on this host, which has exited (the pid now belongs to another process)");
  }
  return "";
}

void retireSecret(const std::string& secret) {
  Retired& r = retired();
  std::lock_guard<std::mutex> g(r.mu);
  std::string h = secretHash(secret);
  if (!r.set.insert(h).second) return;
  r.order.push_back(h);
  if (r.order.size() > kRetiredKept) {
    r.set.erase(r.order.front());
    r.order.pop_front();
  }
}

std::string publishSecret(Store& store) {
  std::string secret = randomSecret();
  store.set(kSecretKey, formatSecretRecord(localSecretRecord(secret)));
  return secret;
}

std::string awaitSecret(Store& store, int rank, const Deadline& deadline) {
  WaitNotice notice(strCat("key '", kSecretKey, "' (rank 0's) in the store (rank ", rank,
                           "; is rank 0 running, with the same store and prefix?)"),
                    BOOT);
  std::string lastStale, why;
  for (;;) {
    int64_t left = deadline.remainingMs();
    int64_t slice = left < 0 ? 250 : std::min<int64_t>(left, 250);
    std::string value;
    try {
      value = store.get(kSecretKey, Deadline::after(slice));
    } catch (const Timeout&) {
      notice.tick();
      if (deadline.expired()) {
        throw Timeout(strCat("rank ", rank, ": rank 0's key '", kSecretKey,
                             "' did not appear in the store within ", deadline.budgetMs(),
                             " ms (is rank 0 running, with the same store and prefix?)"));
      }
      continue;
    }
    SecretRecord rec = parseSecretRecord(value);
    why = staleSecretReason(rec);
    if (why.empty()) return rec.secret;
    if (value != lastStale) {  // once per stale record, not per poll
      lastStale = value;
      XCCL_INFO(BOOT, "rank ", rank, ": ignoring a stale '", kSecretKey, "' record in the store (",
                why, "); waiting for rank 0 of this initialisation to publish its own");
    }
    notice.tick();
    if (deadline.expired()) {
      throw Timeout(strCat("rank ", rank, ": the store held only a stale '", kSecretKey,
                           "' record for ", deadline.budgetMs(), " ms (", why,
                           "): is rank 0 of this initialisation running, with the same store "
                           "and prefix?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(
        left < 0 ? 20 : std::max<int64_t>(1, std::min<int64_t>(left, 20))));
  }
}

std::string recordScope(const std::string& secret) {
  auto mac = hmacSha256(secret, "xccl store scope");
  return toHex(std::string(reinterpret_cast<const char*>(mac.data()), 8)) + "/";
}

}  // namespace xccl
