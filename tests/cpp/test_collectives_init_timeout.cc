// Communicator creation honours XCCL_TIMEOUT_MS (docs/ENV.md): a rank whose peers never
// come fails with xcclTimeout once that deadline passes, not after the 30-minute default.
// Each creation runs in a child process (runProcesses), so a creation that ignored the knob
// is killed and fails the test at its bound instead of holding the suite for 30 minutes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "test_util.h"

namespace {

using xccl_test::MemoryStore;
using xccl_test::runProcesses;
using xccl_test::ScopedEnv;

constexpr const char* kTimeoutMs = "300";
constexpr double kWellUnderSec = 10.0;  // the deadline is 0.3 s; the bound leaves slack
constexpr int kBoundSec = 30;           // runProcesses kills a child still waiting then

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A unique id whose store is gone: drawn in a child process that has exited since, so its
// store server no longer listens (connecting is refused until the deadline).
xcclUniqueId orphanedUniqueId() {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  xcclUniqueId id;
  std::memset(&id, 0, sizeof id);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    xcclUniqueId mine;
    const bool ok = xcclGetUniqueId(&mine) == xcclSuccess &&
                    write(fds[1], &mine, sizeof mine) == static_cast<ssize_t>(sizeof mine);
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  EXPECT_EQ(read(fds[0], &id, sizeof id), static_cast<ssize_t>(sizeof id));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return id;
}

// Rank 1 of 2 through xcclCommInitRank, its unique-id store unreachable: the connection to
// the store is bounded by XCCL_TIMEOUT_MS.
TEST(CommInitTimeout, UniqueIdStoreThatNeverAnswersFailsAtXcclTimeoutMs) {
  const xcclUniqueId id = orphanedUniqueId();
  ScopedEnv env("XCCL_TIMEOUT_MS", kTimeoutMs);
  runProcesses(
      1,
      [&](int) {
        const auto t0 = std::chrono::steady_clock::now();
        xcclComm_t comm = nullptr;
        const xcclResult_t r = xcclCommInitRank(&comm, 2, id, 1);
        EXPECT_EQ(r, xcclTimeout) << xcclGetLastError(nullptr);
        EXPECT_LT(secondsSince(t0), kWellUnderSec) << xcclGetLastError(nullptr);
      },
      kBoundSec);
}

// Rank 1 of 2 through xcclCommInitRankStore whose rank 0 never comes: waiting for the
// secret rank 0 would publish is bounded by XCCL_TIMEOUT_MS.
TEST(CommInitTimeout, StoreRendezvousWithoutRankZeroFailsAtXcclTimeoutMs) {
  ScopedEnv env("XCCL_TIMEOUT_MS", kTimeoutMs);
  runProcesses(
      1,
      [&](int) {
        MemoryStore store;
        const auto t0 = std::chrono::steady_clock::now();
        xcclComm_t comm = nullptr;
        const xcclResult_t r = xcclCommInitRankStore(&comm, 2, 1, store.c(), "lonely/", nullptr);
        EXPECT_EQ(r, xcclTimeout) << xcclGetLastError(nullptr);
        EXPECT_LT(secondsSince(t0), kWellUnderSec) << xcclGetLastError(nullptr);
      },
      kBoundSec);
}

// config->timeout_ms, when set, still wins over XCCL_TIMEOUT_MS.
TEST(CommInitTimeout, ConfigTimeoutWinsOverXcclTimeoutMs) {
  ScopedEnv env("XCCL_TIMEOUT_MS", "600000");
  runProcesses(
      1,
      [&](int) {
        MemoryStore store;
        xcclConfig_t cfg;
        std::memset(&cfg, 0, sizeof cfg);
        cfg.device = -1;
        cfg.timeout_ms = 300;
        const auto t0 = std::chrono::steady_clock::now();
        xcclComm_t comm = nullptr;
        const xcclResult_t r = xcclCommInitRankStore(&comm, 2, 1, store.c(), "lonely/", &cfg);
        EXPECT_EQ(r, xcclTimeout) << xcclGetLastError(nullptr);
        EXPECT_LT(secondsSince(t0), kWellUnderSec) << xcclGetLastError(nullptr);
      },
      kBoundSec);
}

}  // namespace
