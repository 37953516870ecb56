// xdev runtime under concurrency: many threads creating streams, allocating, copying and
// recording events at once; and the process exiting with work still queued.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_xdev_util.h"

namespace {

using xdev_test::kDevices;
using xdev_test::launch;

TEST(XdevThreads, ManyThreadsCreateStreamsAllocateAndCopy) {
  const int kThreads = 8, kIterations = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto ok = [&](xdevError_t rc) {
        if (rc != xdevSuccess) ++failures;
        return rc == xdevSuccess;
      };
      if (!ok(xdevSetDevice(t % kDevices))) return;
      for (int it = 0; it < kIterations; ++it) {
        const size_t n = 4096 + 64 * t + it;
        std::vector<unsigned char> in(n), out(n);
        for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i * 31 + t + it);
        xdevStream_t s;
        void* dev = nullptr;
        xdevEvent_t e;
        if (!ok(xdevStreamCreate(&s)) || !ok(xdevMalloc(&dev, n)) || !ok(xdevEventCreate(&e))) {
          return;
        }
        ok(xdevMemsetAsync(dev, 0, n, s));
        ok(xdevMemcpyAsync(dev, in.data(), n, xdevMemcpyHostToDevice, s));
        ok(xdevEventRecord(e, s));
        ok(xdevStreamWaitEvent(nullptr, e, 0));  // the thread's default stream waits on s
        ok(xdevMemcpyAsync(out.data(), dev, n, xdevMemcpyDeviceToHost, nullptr));
        ok(xdevStreamSynchronize(nullptr));
        if (std::memcmp(in.data(), out.data(), n) != 0) ++failures;
        ok(xdevEventDestroy(e));
        ok(xdevFree(dev));
        ok(xdevStreamDestroy(s));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  for (int d = 0; d < kDevices; ++d) {
    XDEV_ASSERT_OK(xdevSetDevice(d));
    size_t f = 0, total = 0;
    XDEV_ASSERT_OK(xdevMemGetInfo(&f, &total));
    EXPECT_EQ(f, total) << "device " << d << " leaked accounting";
  }
  XDEV_ASSERT_OK(xdevSetDevice(0));
}

TEST(XdevThreads, ConcurrentProducersOnOneStreamKeepEachOnesOrder) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  const int kThreads = 6, kEach = 500;
  std::vector<std::vector<int>> seen(kThreads);  // written by the stream's worker only
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) launch(s, [&seen, t, i] { seen[t].push_back(i); });
    });
  }
  for (auto& th : threads) th.join();
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kEach));
    for (int i = 0; i < kEach; ++i) ASSERT_EQ(seen[t][i], i) << "thread " << t;
  }
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevThreads, QueriesRacingRecordsNeverCrash) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  xdevEvent_t e;
  XDEV_ASSERT_OK(xdevEventCreate(&e));
  XDEV_ASSERT_OK(xdevEventRecord(e, s));  // elapsed time needs a record
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread recorder([&] {
    while (!stop) {
      if (xdevEventRecord(e, s) != xdevSuccess) ++bad;
      launch(s, [] {});
    }
  });
  std::thread querier([&] {
    while (!stop) {
      xdevError_t rc = xdevEventQuery(e);
      if (rc != xdevSuccess && rc != xdevErrorNotReady) ++bad;
      float ms;
      rc = xdevEventElapsedTime(&ms, e, e);
      if (rc != xdevSuccess && rc != xdevErrorNotReady) ++bad;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop = true;
  recorder.join();
  querier.join();
  EXPECT_EQ(bad, 0);
  XDEV_ASSERT_OK(xdevEventSynchronize(e));
  XDEV_ASSERT_OK(xdevEventDestroy(e));
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

// Waits for a child up to `seconds`; kills it and returns -1 when it hangs.
int waitExit(pid_t pid, int seconds) {
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status;
}

// Run in a child process by the next test: leaves a stream blocked forever and work queued
// behind it, then returns from main.
TEST(XdevThreads, ExitChild) {
  if (getenv("XDEV_TEST_EXIT_CHILD") == nullptr) GTEST_SKIP() << "run by ExitWithBlockedWork";
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  XDEV_ASSERT_OK(launch(s, [] {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }));
  XDEV_ASSERT_OK(
      launch(nullptr, [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }));
  XDEV_ASSERT_OK(launch(s, [] {}));
}

TEST(XdevThreads, ExitWithBlockedWorkDoesNotHang) {
  setenv("XDEV_TEST_EXIT_CHILD", "1", 1);  // before fork: the child only calls exec
  // The child exits with host functions queued, so their userData is never freed (as with
  // CUDA): not a leak for a sanitizer build of this test to report.
  const char* asan = getenv("ASAN_OPTIONS");
  std::string savedAsan = asan ? asan : "";
  setenv("ASAN_OPTIONS", ("detect_leaks=0:" + savedAsan).c_str(), 1);
  pid_t pid = fork();
  if (pid == 0) {  // exec afresh: no runtime state inherited from this process
    execl("/proc/self/exe", "test_xdev", "--gtest_filter=XdevThreads.ExitChild", nullptr);
    _exit(127);
  }
  unsetenv("XDEV_TEST_EXIT_CHILD");
  if (asan) {
    setenv("ASAN_OPTIONS", savedAsan.c_str(), 1);
  } else {
    unsetenv("ASAN_OPTIONS");
  }
  ASSERT_GE(pid, 0);
  int status = waitExit(pid, 20);
  ASSERT_NE(status, -1) << "the process hung at exit with a blocked stream";
  ASSERT_TRUE(WIFEXITED(status)) << "child died: status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(XdevThreads, AChildForkedAfterStartGetsAnErrorNotAHang) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  XDEV_ASSERT_OK(launch(s, [] {}));  // the parent has a worker; the child will not
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  pid_t pid = fork();
  if (pid == 0) {
    void* p = nullptr;
    int rc = xdevMalloc(&p, 64) == xdevErrorInternal ? 0 : 1;
    rc |= xdevStreamSynchronize(s) == xdevErrorInternal ? 0 : 2;
    exit(rc);  // runs the exit hook, which must leave the parent's workers alone
  }
  ASSERT_GE(pid, 0);
  int status = waitExit(pid, 20);
  ASSERT_NE(status, -1) << "the forked child hung";
  ASSERT_TRUE(WIFEXITED(status)) << "child died: status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: malloc was not refused, 2: sync was not refused";
  XDEV_EXPECT_OK(xdevStreamSynchronize(s)) << "the parent is unaffected";
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

}  // namespace
