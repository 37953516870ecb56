#include "test_util.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

namespace xccl_test {

MemoryStore::MemoryStore() {
  store_.ctx = this;
  store_.set = &MemoryStore::set;
  store_.get = &MemoryStore::get;
}

int MemoryStore::set(void* ctx, const char* key, const void* value, size_t len) {
  auto* self = static_cast<MemoryStore*>(ctx);
  std::lock_guard<std::mutex> lock(self->mu_);
  self->kv_[key] = std::string(static_cast<const char*>(value), len);
  self->cv_.notify_all();
  return 0;
}

int MemoryStore::get(void* ctx, const char* key, void* value, size_t cap, size_t* len,
                     int64_t timeout_ms) {
  auto* self = static_cast<MemoryStore*>(ctx);
  std::unique_lock<std::mutex> lock(self->mu_);
  auto ready = [&] { return self->kv_.count(key) > 0; };
  if (timeout_ms < 0) {
    self->cv_.wait(lock, ready);
  } else if (!self->cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
    return 1;
  }
  const std::string& v = self->kv_[key];
  *len = v.size();
  std::memcpy(value, v.data(), v.size() < cap ? v.size() : cap);
  return 0;
}

void runThreads(int nranks, const std::function<void(int)>& fn, int timeoutSec) {
  std::atomic<int> done{0};
  std::vector<std::string> errors(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      done.fetch_add(1);
    });
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  while (done.load() < nranks) {
    if (std::chrono::steady_clock::now() > until) {
      fprintf(stderr, "runThreads: %d of %d ranks still running after %d s: hang, aborting\n",
              nranks - done.load(), nranks, timeoutSec);
      fflush(stderr);
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    EXPECT_TRUE(errors[r].empty()) << "rank " << r << " threw: " << errors[r];
  }
}

std::map<int, int> runProcesses(int nranks, const std::function<void(int)>& fn, int timeoutSec,
                                bool expectAllSucceed) {
  std::map<pid_t, int> pids;
  for (int r = 0; r < nranks; ++r) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 0;
      try {
        fn(r);
        rc = ::testing::Test::HasFailure() ? 1 : 0;
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d threw: %s\n", r, e.what());
        rc = 2;
      }
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    if (pid < 0) throw std::runtime_error("fork failed");
    pids[pid] = r;
  }
  std::map<int, int> status;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  while (status.size() < pids.size()) {
    int st = 0;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0 && pids.count(p)) {
      status[pids[p]] = st;
      continue;
    }
    if (std::chrono::steady_clock::now() > until) {
      for (auto& [pid, r] : pids) {
        if (!status.count(r)) kill(pid, SIGKILL);
      }
      for (auto& [pid, r] : pids) {
        if (!status.count(r)) {
          waitpid(pid, &st, 0);
          status[r] = st;
          ADD_FAILURE() << "rank " << r << " (pid " << pid << ") hung: killed after " << timeoutSec
                        << " s";
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (expectAllSucceed) {
    for (auto& [r, st] : status) {
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
          << "rank " << r << " failed: "
          << (WIFEXITED(st) ? "exit " + std::to_string(WEXITSTATUS(st))
                            : "signal " + std::to_string(WTERMSIG(st)));
    }
  }
  return status;
}

std::string readUntilEof(int fd, int timeoutSec) {
  std::string got;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
  return "TIMEOUT";
}

void check(xcclResult_t r, xcclComm_t comm) {
  if (r != xcclSuccess) {
    throw std::runtime_error(std::string(xcclGetErrorString(r)) + ": " + xcclGetLastError(comm));
  }
}

xcclComm_t initThreadComm(MemoryStore& store, int nranks, int rank, const char* prefix,
                          int64_t timeoutMs) {
  xcclConfig_t cfg{};
  cfg.timeout_ms = timeoutMs;
  cfg.device = -1;
  xcclComm_t comm = nullptr;
  check(xcclCommInitRankStore(&comm, nranks, rank, store.c(), prefix, &cfg));
  return comm;
}

xcclComm_t initProcessComm(const xcclUniqueId& id, int nranks, int rank, int64_t timeoutMs) {
  xcclConfig_t cfg{};
  cfg.timeout_ms = timeoutMs;
  cfg.device = -1;
  xcclComm_t comm = nullptr;
  check(xcclCommInitRankConfig(&comm, nranks, id, rank, &cfg));
  return comm;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  const char* old = getenv(name);
  had_ = old != nullptr;
  if (had_) old_ = old;
  if (value) {
    setenv(name, value, 1);
  } else {
    unsetenv(name);
  }
}

ScopedEnv::~ScopedEnv() {
  if (had_) {
    setenv(name_.c_str(), old_.c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

}  // namespace xccl_test
