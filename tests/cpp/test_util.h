// Shared helpers for the GoogleTest suites: ranks as threads or as processes, with hard
// timeouts so that a hang fails the test instead of stalling CI.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "xccl.h"

namespace xccl_test {

// A thread-safe in-memory key-value store exposed through the public xcclStore_t, for
// ranks that are threads of one process.
class MemoryStore {
 public:
  MemoryStore();
  const xcclStore_t* c() const { return &store_; }

 private:
  static int set(void* ctx, const char* key, const void* value, size_t len);
  static int get(void* ctx, const char* key, void* value, size_t cap, size_t* len,
                 int64_t timeout_ms);
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
  xcclStore_t store_;
};

// Runs fn(rank) on `nranks` threads and joins them. A failed gtest assertion in a rank
// fails the test; an exception is reported with its rank. If the ranks have not all
// returned after timeoutSec, the whole test binary aborts with a message (hard timeout).
void runThreads(int nranks, const std::function<void(int rank)>& fn, int timeoutSec = 90);

// Forks `nranks` processes running fn(rank); a child exits 0 when fn returns without a
// failed assertion. Kills every child and fails the test if one fails, crashes, or the
// group exceeds timeoutSec. Returns the exit statuses (waitpid format) by rank.
std::map<int, int> runProcesses(int nranks, const std::function<void(int rank)>& fn,
                                int timeoutSec = 90, bool expectAllSucceed = true);

// Creates one communicator per thread-rank through a MemoryStore shared by the ranks.
// Usage inside runThreads: xcclComm_t comm = initThreadComm(store, nranks, rank);
xcclComm_t initThreadComm(MemoryStore& store, int nranks, int rank, const char* prefix = "t/",
                          int64_t timeoutMs = 60000);
// Inside runProcesses: a host communicator through the unique id made before the fork.
xcclComm_t initProcessComm(const xcclUniqueId& id, int nranks, int rank, int64_t timeoutMs = 60000);

// Throws std::runtime_error with xcclGetLastError text when r != xcclSuccess.
void check(xcclResult_t r, xcclComm_t comm = nullptr);
#define XCCL_TEST_CHECK(expr) ::xccl_test::check((expr))

// Reads a socket until the peer closes it (or timeoutSec passes); returns the bytes
// received, or "TIMEOUT" if the close never came. For tests of refused connections.
std::string readUntilEof(int fd, int timeoutSec = 3);

// Scoped environment variable override (restored on destruction).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();

 private:
  std::string name_;
  bool had_;
  std::string old_;
};

}  // namespace xccl_test
