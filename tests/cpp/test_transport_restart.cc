// Rendezvous through a store that outlives its users (bootstrap/rendezvous.cc): the secret
// record and what makes it stale, re-initialisation under one store prefix (ranks as threads
// of one process: torch's destroy_process_group + init_process_group), and a restarted job
// whose store still holds the records of processes that have exited (torchrun keeps its store
// across restarts).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/bootstrap/bootstrap_internal.h"
#include "common/error.h"
#include "test_util.h"

namespace {

using xccl::Deadline;

// The public xcclStore_t over an internal Store (here a unique-id store client: processes
// share it, and it lives in the test's parent process, longer than any rank).
struct CStore {
  explicit CStore(std::unique_ptr<xccl::Store> s) : store(std::move(s)) {}
  std::unique_ptr<xccl::Store> store;
  xcclStore_t c{this, &set, &get};

  static int set(void* ctx, const char* key, const void* value, size_t len) {
    try {
      static_cast<CStore*>(ctx)->store->set(key, std::string(static_cast<const char*>(value), len));
      return 0;
    } catch (...) {
      return 2;
    }
  }
  static int get(void* ctx, const char* key, void* value, size_t cap, size_t* len,
                 int64_t timeoutMs) {
    try {
      std::string v = static_cast<CStore*>(ctx)->store->get(key, Deadline::after(timeoutMs));
      *len = v.size();
      std::memcpy(value, v.data(), std::min(cap, v.size()));
      return 0;
    } catch (const xccl::Timeout&) {
      return 1;
    } catch (...) {
      return 2;
    }
  }
};

// A blocking allreduce of (rank + salt) on the caller's thread; returns the sum every rank
// should see, after checking it.
void checkedAllReduce(xcclComm_t comm, int rank, int nranks, int salt) {
  std::vector<float> in(64, static_cast<float>(rank + salt)), out(64, -1.f);
  xccl_test::check(xcclAllReduce(in.data(), out.data(), in.size(), xcclFloat32, xcclSum, comm,
                                 XCCL_STREAM_CALLER),
                   comm);
  const float want = static_cast<float>(nranks * (nranks - 1) / 2 + nranks * salt);
  for (float v : out) ASSERT_EQ(v, want) << "rank " << rank << " salt " << salt;
}

xcclComm_t initComm(const xcclStore_t* store, int nranks, int rank, const char* prefix,
                    int64_t timeoutMs) {
  xcclConfig_t cfg{};
  cfg.timeout_ms = timeoutMs;
  cfg.device = -1;
  xcclComm_t comm = nullptr;
  xccl_test::check(xcclCommInitRankStore(&comm, nranks, rank, store, prefix, &cfg));
  return comm;
}

int deadPid() {
  pid_t child = fork();
  if (child == 0) _exit(0);
  int st = 0;
  waitpid(child, &st, 0);
  return static_cast<int>(child);
}

TEST(Rendezvous, SecretRecordIsStrictAndCanonical) {
  xccl::SecretRecord rec = xccl::localSecretRecord(xccl::randomSecret());
  EXPECT_EQ(rec.pid, getpid());
  EXPECT_GT(rec.startTime, 0);
  const std::string text = xccl::formatSecretRecord(rec);
  xccl::SecretRecord back = xccl::parseSecretRecord(text);
  EXPECT_EQ(back.secret, rec.secret);
  EXPECT_EQ(back.pid, rec.pid);
  EXPECT_EQ(back.startTime, rec.startTime);
  EXPECT_EQ(back.hostId, rec.hostId);
  EXPECT_EQ(xccl::formatSecretRecord(back), text);

  const std::string hex(64, 'a');
  for (const std::string& bad :
       {std::string(""), std::string("XSR1 "), hex /* the bare secret older releases wrote */,
        "XSR2 " + hex + " 1 0 h", "XSR1 " + std::string(64, 'A') + " 1 0 h",
        "XSR1 " + std::string(63, 'a') + " 1 0 h", "XSR1 " + hex + " 0 0 h",
        "XSR1 " + hex + " 01 0 h", "XSR1 " + hex + " -1 0 h", "XSR1 " + hex + " 1 -1 h",
        "XSR1 " + hex + " 1 00 h", "XSR1 " + hex + " 1 0 ", "XSR1 " + hex + " 1 0",
        "XSR1 " + hex + " 2147483648 0 h", "XSR1 " + hex + " 1 99999999999999999999 h",
        "XSR1 " + hex + " 1 0 " + std::string(4097, 'h')}) {
    EXPECT_THROW(xccl::parseSecretRecord(bad), xccl::RemoteError) << bad.substr(0, 90);
  }
}

TEST(Rendezvous, StaleSecretRecordsAreRecognised) {
  xccl::SecretRecord mine = xccl::localSecretRecord(xccl::randomSecret());
  EXPECT_EQ(xccl::staleSecretReason(mine), "");

  xccl::SecretRecord gone = mine;
  gone.pid = deadPid();
  EXPECT_NE(xccl::staleSecretReason(gone).find("which has exited"), std::string::npos)
      << xccl::staleSecretReason(gone);

  xccl::SecretRecord reused = mine;  // this pid, but not the process that wrote the record
  reused.startTime = mine.startTime + 1;
  EXPECT_NE(xccl::staleSecretReason(reused).find("belongs to another process"), std::string::npos)
      << xccl::staleSecretReason(reused);

  xccl::SecretRecord unknownStart = mine;  // a writer that could not read its start time
  unknownStart.startTime = 0;
  EXPECT_EQ(xccl::staleSecretReason(unknownStart), "");

  xccl::SecretRecord elsewhere = gone;  // another host: nothing to check from here
  elsewhere.hostId = "another-host/boot/net:[1]/pid:[2]";
  EXPECT_EQ(xccl::staleSecretReason(elsewhere), "");

  xccl::retireSecret(mine.secret);  // this process made a communicator with it
  EXPECT_NE(xccl::staleSecretReason(mine).find("earlier initialisation"), std::string::npos)
      << xccl::staleSecretReason(mine);
  elsewhere.secret = mine.secret;
  EXPECT_NE(xccl::staleSecretReason(elsewhere), "");
}

// The same store and prefix for every initialisation, and ranks that start the next one as
// soon as they are done with the last: rank 0 starts late, so the others find the previous
// initialisation's records (its secret, rings and doorbells, in this very process) first.
// Before records were scoped, they used them and failed to open a destroyed doorbell.
TEST(Rendezvous, ReinitialisingUnderOneStorePrefix) {
  const int n = 3, cycles = 15;
  xccl_test::MemoryStore store;
  xccl_test::runThreads(
      n,
      [&](int rank) {
        std::mt19937 rng(rank);
        for (int c = 0; c < cycles; ++c) {
          SCOPED_TRACE(c);
          int delayMs = rank == 0 ? 20 + static_cast<int>(rng() % 20) : static_cast<int>(rng() % 3);
          std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
          xcclComm_t comm = initComm(store.c(), n, rank, "job/", 20000);
          checkedAllReduce(comm, rank, n, c);
          xccl_test::check(xcclCommDestroy(comm));
        }
      },
      120);
}

// A job restarted with the store of its first attempt (as torchrun keeps it): the new ranks
// find the first attempt's secret and records, all written by processes that have exited, and
// rank 0 of the new attempt publishes late. The others must wait past the stale secret.
TEST(Rendezvous, RestartedJobWaitsPastRecordsOfExitedProcesses) {
  xcclUniqueId id;
  xccl::createUniqueId(&id);  // the store server lives in this process, across both attempts
  const int n = 3;
  for (int attempt = 0; attempt < 2; ++attempt) {
    SCOPED_TRACE(attempt);
    xccl_test::runProcesses(
        n,
        [&](int rank) {
          CStore store(xccl::connectUniqueIdStore(id, Deadline::after(10000)));
          if (attempt == 1 && rank == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(600));
          xcclComm_t comm = initComm(&store.c, n, rank, "job/", 20000);
          checkedAllReduce(comm, rank, n, 10 * attempt);
          if (attempt == 0) _exit(0);  // the first attempt "crashes": no destroy, no goodbye
          xccl_test::check(xcclCommDestroy(comm));
        },
        60);
  }
}

// Only stale records, and no rank 0 to replace them: the wait ends at the deadline with an
// error that says what was found.
TEST(Rendezvous, OnlyAStaleSecretTimesOutSayingSo) {
  xccl_test::MemoryStore store;
  xccl::SecretRecord old = xccl::localSecretRecord(xccl::randomSecret());
  old.pid = deadPid();
  const std::string v = xccl::formatSecretRecord(old);
  store.c()->set(store.c()->ctx, "job/secret", v.data(), v.size());
  xcclConfig_t cfg{};
  cfg.timeout_ms = 600;
  cfg.device = -1;
  xcclComm_t comm = nullptr;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(xcclCommInitRankStore(&comm, 2, 1, store.c(), "job/", &cfg), xcclTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  const std::string err = xcclGetLastError(nullptr);
  EXPECT_NE(err.find("only a stale 'secret' record"), std::string::npos) << err;
  EXPECT_NE(err.find("which has exited"), std::string::npos) << err;
}

}  // namespace
