// Communicators made from communicators (core/derive.h): split by colour, shrink to the
// survivors of a lost rank, grow by new processes, revoke, and the liveness probe that names
// the lost ones.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "xccl.h"

namespace {

using xccl_test::check;

// Allreduce (sum) of rank-dependent floats on comm; returns the first element.
float sumOf(xcclComm_t comm, float mine, size_t count = 1000) {
  std::vector<float> buf(count, mine);
  check(xcclAllReduce(buf.data(), buf.data(), count, xcclFloat32, xcclSum, comm, nullptr), comm);
  xcclEvent_t ev;
  check(xcclEventRecord(&ev, comm), comm);
  check(xcclEventWait(&ev, -1), comm);
  for (float v : buf) EXPECT_EQ(v, buf[0]);
  return buf[0];
}

// The outcome of an allreduce that is expected to fail, and the error text.
xcclResult_t failingAllReduce(xcclComm_t comm, std::string* text) {
  std::vector<float> buf(1 << 16, 1.0f);
  xcclResult_t r =
      xcclAllReduce(buf.data(), buf.data(), buf.size(), xcclFloat32, xcclSum, comm, nullptr);
  if (r == xcclSuccess) {
    xcclEvent_t ev;
    check(xcclEventRecord(&ev, comm), comm);
    r = xcclEventWait(&ev, 20000);
  }
  *text = xcclGetLastError(comm);
  return r;
}

TEST(CommSplit, ColoursFormCommunicatorsRankedByKey) {
  xccl_test::MemoryStore store;
  const int n = 4;
  xccl_test::runThreads(n, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, n, rank);
    xcclComm_t child = nullptr;
    // Even and odd ranks; the key reverses the order inside each colour.
    check(xcclCommSplit(comm, rank % 2, -rank, &child, nullptr), comm);
    ASSERT_NE(child, nullptr);
    int count = 0, childRank = -1;
    check(xcclCommCount(child, &count));
    check(xcclCommUserRank(child, &childRank));
    EXPECT_EQ(count, 2);
    EXPECT_EQ(childRank, rank < 2 ? 1 : 0);  // ranks 2 and 3 have the lower keys
    EXPECT_EQ(sumOf(child, static_cast<float>(rank)), rank % 2 == 0 ? 0.0f + 2 : 1.0f + 3);
    // The parent still works beside its child.
    EXPECT_EQ(sumOf(comm, 1.0f), 4.0f);
    check(xcclCommDestroy(child));
    check(xcclCommDestroy(comm));
  });
}

TEST(CommSplit, NoColourTakesPartAndGetsNull) {
  xccl_test::MemoryStore store;
  const int n = 3;
  xccl_test::runThreads(n, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, n, rank);
    xcclComm_t child = reinterpret_cast<xcclComm_t>(0x1);
    check(xcclCommSplit(comm, rank == 1 ? XCCL_SPLIT_NOCOLOR : 7, rank, &child, nullptr), comm);
    if (rank == 1) {
      EXPECT_EQ(child, nullptr);
    } else {
      ASSERT_NE(child, nullptr);
      EXPECT_EQ(sumOf(child, 1.0f), 2.0f);
      check(xcclCommDestroy(child));
    }
    EXPECT_EQ(xcclCommSplit(comm, -5, 0, &child, nullptr), xcclInvalidArgument);
    check(xcclCommDestroy(comm));
  });
}

// A rank that stops taking part (its communicator aborted, as a process that died closes
// its connections): the others' collective fails, they shrink it away and go on.
TEST(CommShrink, SurvivorsOfAnAbortedRankContinue) {
  xccl_test::MemoryStore store;
  const int n = 4, lost = 2;
  xccl_test::runThreads(n, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, n, rank);
    EXPECT_EQ(sumOf(comm, 1.0f), 4.0f);
    if (rank == lost) {
      check(xcclCommAbort(comm));
      return;
    }
    std::string why;
    EXPECT_NE(failingAllReduce(comm, &why), xcclSuccess);
    const int exclude[] = {lost};
    xcclComm_t child = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    check(xcclCommShrink(comm, exclude, 1, &child, nullptr, XCCL_SHRINK_ABORT), comm);
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_LT(ms, 10000);  // a hang guard, not a timing claim (bench/bench_shrink.py times it)
    int count = 0, childRank = -1;
    check(xcclCommCount(child, &count));
    check(xcclCommUserRank(child, &childRank));
    EXPECT_EQ(count, n - 1);
    EXPECT_EQ(childRank, rank < lost ? rank : rank - 1);
    // Survivors: ranks 0, 1, 3 contribute rank + 1.
    EXPECT_EQ(sumOf(child, static_cast<float>(rank + 1)), 1.0f + 2 + 4);
    check(xcclCommDestroy(child));
    check(xcclCommAbort(comm));
  });
}

// A rank that is excluded but still runs a collective on the parent: the others' shrink with
// XCCL_SHRINK_ABORT fails that collective cleanly (the parent's connections close), no hang.
TEST(CommShrink, AbortFailsACollectiveTheExcludedRankStillRuns) {
  xccl_test::MemoryStore store;
  const int n = 3, excluded = 2;
  xccl_test::runThreads(n, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, n, rank);
    if (rank == excluded) {
      std::string why;
      EXPECT_EQ(failingAllReduce(comm, &why), xcclRemoteError);
      check(xcclCommAbort(comm));
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // it is waiting by now
    const int exclude[] = {excluded};
    xcclComm_t child = nullptr;
    check(xcclCommShrink(comm, exclude, 1, &child, nullptr, XCCL_SHRINK_ABORT), comm);
    EXPECT_EQ(sumOf(child, 1.0f), 2.0f);
    check(xcclCommDestroy(child));
    check(xcclCommAbort(comm));
  });
}

TEST(CommShrink, RejectsBadExclusionLists) {
  xccl_test::MemoryStore store;
  const int n = 2;
  xccl_test::runThreads(n, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, n, rank);
    xcclComm_t child = nullptr;
    const int other = 1 - rank;
    const int none[] = {0};
    const int outOfRange[] = {n};
    const int twice[] = {other, other};
    const int self[] = {rank};
    const int both[] = {0, 1};
    EXPECT_EQ(xcclCommShrink(comm, none, 0, &child, nullptr, 0), xcclInvalidArgument);
    EXPECT_EQ(xcclCommShrink(comm, nullptr, 1, &child, nullptr, 0), xcclInvalidArgument);
    EXPECT_EQ(xcclCommShrink(comm, outOfRange, 1, &child, nullptr, 0), xcclInvalidArgument);
    EXPECT_EQ(xcclCommShrink(comm, twice, 2, &child, nullptr, 0), xcclInvalidArgument);
    EXPECT_EQ(xcclCommShrink(comm, self, 1, &child, nullptr, 0), xcclInvalidArgument);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("excludes itself"), std::string::npos);
    EXPECT_EQ(xcclCommShrink(comm, both, 2, &child, nullptr, 0), xcclInvalidArgument);
    EXPECT_EQ(xcclCommShrink(comm, &other, 1, &child, nullptr, 7), xcclInvalidArgument);
    EXPECT_EQ(child, nullptr);
    // Nothing above touched the communicator.
    EXPECT_EQ(sumOf(comm, 1.0f), 2.0f);
    check(xcclCommDestroy(comm));
  });
}

// Revoke on one rank fails the others' pending operation with the reason; the revoked
// communicator can still be split into a working one.
TEST(CommRevoke, PeersFailNamingTheRevocationAndCanSplit) {
  xccl_test::MemoryStore store;
  const int n = 3;
  xccl_test::runThreads(n, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, n, rank);
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the others are waiting
      check(xcclCommRevoke(comm), comm);
      std::string why;
      EXPECT_NE(failingAllReduce(comm, &why), xcclSuccess);
      EXPECT_NE(why.find("revoked"), std::string::npos) << why;
    } else {
      std::string why;
      EXPECT_EQ(failingAllReduce(comm, &why), xcclRemoteError);
      EXPECT_NE(why.find("rank 2 revoked the communicator"), std::string::npos) << why;
    }
    xcclComm_t child = nullptr;
    check(xcclCommSplit(comm, 0, rank, &child, nullptr), comm);
    EXPECT_EQ(sumOf(child, 2.0f), 6.0f);
    check(xcclCommDestroy(child));
    check(xcclCommAbort(comm));
  });
}

// Ranks as processes: rank 0 is SIGKILLed; the probe names it at once, and the survivors
// shrink over their own bootstrap services (the child's rank 0 is parent rank 1), never
// asking the unique-id store the parent was made with.
TEST(CommShrink, ProbeFindsAKilledProcessAndSurvivorsShrink) {
  xcclUniqueId id;
  check(xcclGetUniqueId(&id));
  const int n = 3, lost = 0;  // rank 0: the one the child's rendezvous must not rely on
  auto status = xccl_test::runProcesses(
      n,
      [&](int rank) {
        xcclConfig_t cfg{};
        cfg.device = -1;
        cfg.timeout_ms = 20000;
        xcclComm_t comm = nullptr;
        check(xcclCommInitRankConfig(&comm, n, id, rank, &cfg));
        EXPECT_EQ(sumOf(comm, 1.0f), 3.0f);
        if (rank == lost) raise(SIGKILL);
        std::string why;
        EXPECT_EQ(failingAllReduce(comm, &why), xcclRemoteError);
        EXPECT_NE(why.find("rank 0"), std::string::npos) << why;
        std::vector<int> alive(n, -1);
        auto t0 = std::chrono::steady_clock::now();
        check(xcclCommProbeAlive(comm, alive.data(), 5000), comm);
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
        EXPECT_EQ(alive, (std::vector<int>{0, 1, 1}));
        const int exclude[] = {lost};
        xcclComm_t child = nullptr;
        check(xcclCommShrink(comm, exclude, 1, &child, nullptr, XCCL_SHRINK_ABORT), comm);
        EXPECT_EQ(sumOf(child, static_cast<float>(rank)), 3.0f);
        check(xcclCommDestroy(child));
        check(xcclCommAbort(comm));
      },
      60, /*expectAllSucceed=*/false);
  ASSERT_EQ(status.size(), 3u);
  EXPECT_TRUE(WIFSIGNALED(status[lost]) && WTERMSIG(status[lost]) == SIGKILL);
  for (int r = 1; r < n; ++r) {
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0) << "rank " << r;
  }
}

// A member killed (or stopped) before it takes part: the others' split (waiting for its
// vote) and shrink (waiting for its record; with 8 members or more the child's rank 0
// gathers the records and must pass the failure on to the ranks waiting for its list) fail,
// naming it, at once for a dead member and after XCCL_HEARTBEAT_TIMEOUT_MS for a stopped
// one, instead of at the 30 s timeout.
enum class Loss { kKill, kStop };
// `fanout`: XCCL_BOOTSTRAP_FANOUT in every rank (null: the default), which shapes the
// bootstrap tree from 8 members on ("0": rank 0 gathers through the store instead).
static void expectCreationFailsNamingTheLost(int n, int lost, bool viaShrink,
                                             Loss how = Loss::kKill, const char* fanout = nullptr) {
  xcclUniqueId id;
  check(xcclGetUniqueId(&id));
  // The stopped member's pid, for the survivors to end it (a stopped child never exits).
  auto* lostPid =
      static_cast<std::atomic<int>*>(mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(lostPid, MAP_FAILED);
  new (lostPid) std::atomic<int>(0);
  auto status = xccl_test::runProcesses(
      n,
      [&](int rank) {
        setenv("XCCL_HEARTBEAT_TIMEOUT_MS", "1500", 1);
        if (fanout != nullptr) setenv("XCCL_BOOTSTRAP_FANOUT", fanout, 1);
        xcclConfig_t cfg{};
        cfg.device = -1;
        cfg.timeout_ms = 30000;
        xcclComm_t comm = nullptr;
        check(xcclCommInitRankConfig(&comm, n, id, rank, &cfg));
        EXPECT_EQ(sumOf(comm, 1.0f, 16), static_cast<float>(n));
        if (rank == lost) {
          lostPid->store(getpid());
          raise(how == Loss::kKill ? SIGKILL : SIGSTOP);
        }
        if (viaShrink && rank == 0) {  // excluded; stays for the others' rendezvous service
          std::this_thread::sleep_for(std::chrono::seconds(how == Loss::kKill ? 3 : 5));
          check(xcclCommAbort(comm));
          return;
        }
        auto t0 = std::chrono::steady_clock::now();
        xcclComm_t child = nullptr;
        const int exclude[] = {0};
        const xcclResult_t r = viaShrink ? xcclCommShrink(comm, exclude, 1, &child, nullptr, 0)
                                         : xcclCommSplit(comm, 0, rank, &child, nullptr);
        const std::string why = xcclGetLastError(comm);
        EXPECT_EQ(r, xcclRemoteError) << why;
        EXPECT_EQ(child, nullptr);
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << why;
        EXPECT_NE(why.find("parent rank " + std::to_string(lost)), std::string::npos) << why;
        // A stopped parent rank 0 hosts the votes: its service does not answer the request.
        const char* said = how == Loss::kKill        ? "gone"
                           : lost == 0 && !viaShrink ? "not answer"
                                                     : "has not answered for";
        EXPECT_NE(why.find(said), std::string::npos) << why;
        // Survivors go on (to a shrink): their services outlive the others' reading.
        std::this_thread::sleep_for(std::chrono::seconds(1));
        if (how == Loss::kStop && lostPid->load() > 0) kill(lostPid->load(), SIGKILL);
        check(xcclCommAbort(comm));
      },
      60, /*expectAllSucceed=*/false);
  munmap(lostPid, sizeof(std::atomic<int>));
  ASSERT_EQ(status.size(), static_cast<size_t>(n));
  EXPECT_TRUE(WIFSIGNALED(status[lost]) && WTERMSIG(status[lost]) == SIGKILL);
  for (int r = 0; r < n; ++r) {
    if (r == lost) continue;
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0) << "rank " << r;
  }
}

TEST(CommSplit, AMemberKilledBeforeItVotesFailsTheOthersAtOnceNamingIt) {
  expectCreationFailsNamingTheLost(4, 2, /*viaShrink=*/false);
}

// Rank 0 hosts the votes: its service refuses, and that is a verdict too (no retries).
TEST(CommSplit, ParentRank0KilledBeforeTheSplitFailsTheOthersAtOnceNamingIt) {
  expectCreationFailsNamingTheLost(3, 0, /*viaShrink=*/false);
}

TEST(CommSplit, ParentRank0StoppedBeforeTheSplitFailsTheOthersAfterTheHeartbeatTimeout) {
  expectCreationFailsNamingTheLost(3, 0, /*viaShrink=*/false, Loss::kStop);
}

TEST(CommSplit, AMemberStoppedBeforeItVotesFailsTheOthersAfterTheHeartbeatTimeout) {
  expectCreationFailsNamingTheLost(3, 1, /*viaShrink=*/false, Loss::kStop);
}

TEST(CommShrink, AMemberKilledBeforeItsRecordFailsTheOthersAtOnceNamingIt) {
  expectCreationFailsNamingTheLost(4, 3, /*viaShrink=*/true);
}

// 9 members: with XCCL_BOOTSTRAP_FANOUT=0 the child's rank 0 gathers the records and must
// pass the failure on to the ranks waiting for its list.
TEST(CommShrink, AMemberKilledBeforeTheGatherFailsTheOthersAtOnceNamingIt) {
  expectCreationFailsNamingTheLost(10, 9, /*viaShrink=*/true, Loss::kKill, "0");
}

// 9 members through a bootstrap tree of fanout 2: parent rank 4 is the child's rank 3, which
// heads ranks 3-4; its parent (rank 1) sees it gone and passes that on up and down, and its
// child (rank 4) finds it gone.
TEST(CommShrink, AnInnerRankOfTheBootstrapTreeKilledFailsTheOthersAtOnceNamingIt) {
  expectCreationFailsNamingTheLost(10, 4, /*viaShrink=*/true, Loss::kKill, "2");
}

TEST(CommShrink, AnInnerRankOfTheBootstrapTreeStoppedFailsTheOthersAfterTheHeartbeatTimeout) {
  expectCreationFailsNamingTheLost(10, 4, /*viaShrink=*/true, Loss::kStop, "2");
}

TEST(CommShrink, AMemberStoppedBeforeItsRecordFailsTheOthersAfterTheHeartbeatTimeout) {
  expectCreationFailsNamingTheLost(4, 2, /*viaShrink=*/true, Loss::kStop);
}

// Two members and two new threads: the member that made the id passes it, the other
// passes NULL; ranks are kept, the new ones take 2 and 3, and the parent still works.
TEST(CommGrow, MembersAndNewRanksFormTheLargerCommunicator) {
  xccl_test::MemoryStore store;
  std::atomic<bool> ready{false};
  xcclUniqueId id{};
  xccl_test::runThreads(4, [&](int rank) {
    xcclComm_t grown = nullptr;
    xcclComm_t comm = nullptr;
    if (rank < 2) {
      comm = xccl_test::initThreadComm(store, 2, rank);
      if (rank == 0) {
        check(xcclCommGetUniqueId(comm, &id), comm);
        ready = true;
      }
      check(xcclCommGrow(comm, 4, rank == 0 ? &id : nullptr, -1, &grown, nullptr), comm);
    } else {
      for (int i = 0; i < 20000 && !ready.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_TRUE(ready.load());
      xcclConfig_t cfg{};
      cfg.device = -1;
      cfg.timeout_ms = 20000;
      check(xcclCommGrow(nullptr, 4, &id, rank, &grown, &cfg), nullptr);
    }
    ASSERT_NE(grown, nullptr);
    int count = 0, me = -1;
    check(xcclCommCount(grown, &count));
    check(xcclCommUserRank(grown, &me));
    EXPECT_EQ(count, 4);
    EXPECT_EQ(me, rank);
    EXPECT_EQ(sumOf(grown, static_cast<float>(rank + 1)), 1.0f + 2 + 3 + 4);
    if (comm != nullptr) {
      EXPECT_EQ(sumOf(comm, 1.0f), 2.0f);  // the parent beside its grown child
      check(xcclCommDestroy(comm));
    }
    check(xcclCommDestroy(grown));
  });
}

TEST(CommGrow, BadArgumentsAreRefusedWithoutWaiting) {
  xccl_test::MemoryStore store;
  xcclComm_t comm = xccl_test::initThreadComm(store, 1, 0);
  xcclUniqueId grow{}, plain{};
  check(xcclCommGetUniqueId(comm, &grow), comm);
  check(xcclGetUniqueId(&plain));
  xcclComm_t out = reinterpret_cast<xcclComm_t>(0x1);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(xcclInvalidArgument, xcclCommGrow(comm, 3, &grow, 0, &out, nullptr));  // rank != -1
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(xcclInvalidArgument, xcclCommGrow(comm, 1, &grow, -1, &out, nullptr));  // not larger
  EXPECT_EQ(xcclInvalidArgument, xcclCommGrow(comm, 3, &plain, -1, &out, nullptr));
  EXPECT_EQ(xcclInvalidArgument, xcclCommGrow(nullptr, 3, &plain, 2, &out, nullptr));
  EXPECT_EQ(xcclInvalidArgument, xcclCommGrow(nullptr, 3, nullptr, 2, &out, nullptr));
  EXPECT_EQ(xcclInvalidArgument, xcclCommGrow(nullptr, 3, &grow, 0, &out, nullptr));  // a member's
  EXPECT_EQ(xcclInvalidArgument, xcclCommGrow(nullptr, 3, &grow, 3, &out, nullptr));  // >= nranks
  EXPECT_EQ(xcclInvalidArgument, xcclCommGrow(nullptr, 1, &grow, 1, &out, nullptr));
  EXPECT_EQ(xcclInvalidArgument, xcclCommGrow(comm, 3, &grow, -1, nullptr, nullptr));
  EXPECT_EQ(xcclInvalidArgument, xcclCommGetUniqueId(comm, nullptr));
  EXPECT_NE(xcclSuccess, xcclCommInitRank(&out, 2, grow, 1));  // a grow id is not a unique id
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  check(xcclCommDestroy(comm));
}

// The whole story with processes: a rank is SIGKILLed, the survivors shrink, and a new
// process takes the lost one's place through a grow (the id passed through a file).
TEST(CommGrow, AReplacementProcessJoinsTheSurvivors) {
  xcclUniqueId id;
  check(xcclGetUniqueId(&id));
  char dir[] = "/tmp/xccl-grow-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string idFile = std::string(dir) + "/id";
  const int n = 3, lost = 2, replacement = 3;
  auto status = xccl_test::runProcesses(
      4,
      [&](int proc) {
        xcclConfig_t cfg{};
        cfg.device = -1;
        cfg.timeout_ms = 20000;
        xcclComm_t grown = nullptr;
        if (proc == replacement) {
          xcclUniqueId growId{};
          for (int i = 0; i < 20000; ++i) {
            FILE* f = std::fopen(idFile.c_str(), "rb");
            const bool got = f != nullptr && std::fread(growId.internal, 1, sizeof(growId.internal),
                                                        f) == sizeof(growId.internal);
            if (f != nullptr) std::fclose(f);
            if (got) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          check(xcclCommGrow(nullptr, n, &growId, lost, &grown, &cfg), nullptr);
          EXPECT_EQ(sumOf(grown, 1.0f), 3.0f);
          check(xcclCommDestroy(grown));
          return;
        }
        xcclComm_t comm = nullptr;
        check(xcclCommInitRankConfig(&comm, n, id, proc, &cfg));
        EXPECT_EQ(sumOf(comm, 1.0f), 3.0f);
        if (proc == lost) raise(SIGKILL);
        std::string why;
        EXPECT_EQ(failingAllReduce(comm, &why), xcclRemoteError);
        const int exclude[] = {lost};
        xcclComm_t shrunk = nullptr;
        check(xcclCommShrink(comm, exclude, 1, &shrunk, nullptr, XCCL_SHRINK_ABORT), comm);
        EXPECT_EQ(sumOf(shrunk, 1.0f), 2.0f);
        xcclUniqueId growId{};
        if (proc == 0) {
          check(xcclCommGetUniqueId(shrunk, &growId), shrunk);
          const std::string tmp = idFile + ".tmp";
          FILE* f = std::fopen(tmp.c_str(), "wb");
          ASSERT_NE(f, nullptr);
          ASSERT_EQ(std::fwrite(growId.internal, 1, sizeof(growId.internal), f),
                    sizeof(growId.internal));
          std::fclose(f);
          ASSERT_EQ(std::rename(tmp.c_str(), idFile.c_str()), 0);
        }
        check(xcclCommGrow(shrunk, n, proc == 0 ? &growId : nullptr, -1, &grown, nullptr), shrunk);
        int me = -1;
        check(xcclCommUserRank(grown, &me));
        EXPECT_EQ(me, proc);  // survivors 0 and 1 keep their ranks; the replacement is 2
        EXPECT_EQ(sumOf(grown, 1.0f), 3.0f);
        check(xcclCommDestroy(grown));
        check(xcclCommDestroy(shrunk));
        check(xcclCommAbort(comm));
      },
      60, /*expectAllSucceed=*/false);
  std::remove(idFile.c_str());
  ::rmdir(dir);
  ASSERT_EQ(status.size(), 4u);
  EXPECT_TRUE(WIFSIGNALED(status[lost]) && WTERMSIG(status[lost]) == SIGKILL);
  for (int p : {0, 1, replacement}) {
    EXPECT_TRUE(WIFEXITED(status[p]) && WEXITSTATUS(status[p]) == 0) << "process " << p;
  }
}

}  // namespace

namespace {

// A caller whose group failed half-way discards it: nothing recorded runs, the thread is out
// of the group, and an event recorded inside an open group is refused (it would be complete
// before the group's operations ran: an output never reduced, read as a result).
TEST(Group, DiscardDropsWhatWasRecordedAndEventsInsideAGroupAreRefused) {
  xccl_test::MemoryStore store;
  const int n = 2;
  xccl_test::runThreads(n, [&](int rank) {
    xcclComm_t comm = xccl_test::initThreadComm(store, n, rank);
    std::vector<float> buf(8, 5.0f);
    check(xcclGroupStart());
    check(xcclAllReduce(buf.data(), buf.data(), buf.size(), xcclFloat32, xcclSum, comm, nullptr),
          comm);
    xcclEvent_t ev;
    EXPECT_EQ(xcclEventRecord(&ev, comm), xcclInvalidUsage);
    EXPECT_NE(std::string(xcclGetLastError(nullptr)).find("open group"), std::string::npos);
    check(xcclGroupDiscard());
    EXPECT_EQ(xcclGroupDiscard(), xcclInvalidUsage);  // no group open any more
    EXPECT_EQ(buf[0], 5.0f);                          // the discarded allreduce never ran
    EXPECT_EQ(sumOf(comm, static_cast<float>(rank + 1)), 3.0f);
    check(xcclCommDestroy(comm));
  });
}

}  // namespace
