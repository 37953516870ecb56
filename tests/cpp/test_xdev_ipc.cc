// xdev runtime: inter-process memory (xdevIpcGetMemHandle / xdevIpcOpenMemHandle). Device
// memory lives in shareable segments; another process maps a buffer and reads and writes it
// in place. The cross-process cases run a second process: this binary, exec'd afresh with a
// filter and the handle in the environment (a forked child may not use the runtime).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "test_xdev_util.h"

namespace {

std::string hex(const xdevIpcMemHandle_t& h) {
  std::string s;
  char b[3];
  for (char c : h.reserved) {
    std::snprintf(b, sizeof(b), "%02x", static_cast<unsigned char>(c));
    s += b;
  }
  return s;
}

xdevIpcMemHandle_t unhex(const std::string& s) {
  xdevIpcMemHandle_t h{};
  for (size_t i = 0; i < sizeof(h.reserved) && 2 * i + 1 < s.size(); ++i) {
    h.reserved[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  }
  return h;
}

// Runs this binary's test `filter` in a fresh process with `env` added; returns its status.
int runChild(const char* filter, const std::vector<std::string>& env) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    for (const auto& kv : env) putenv(const_cast<char*>(kv.c_str()));
    std::string f = std::string("--gtest_filter=") + filter;
    execl("/proc/self/exe", "test_xdev", f.c_str(), nullptr);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

TEST(XdevIpc, OwnHandleOpensToTheSamePointerAndCarriesTheAllocationsRest) {
  char* p = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&p), 1 << 20));
  xdevIpcMemHandle_t h;
  XDEV_ASSERT_OK(xdevIpcGetMemHandle(&h, p + 4096));  // an interior pointer
  size_t left = 0;
  XDEV_ASSERT_OK(xdevIpcMemHandleGetSize(&h, &left));
  EXPECT_EQ(left, (1u << 20) - 4096);
  void* q = nullptr;
  XDEV_ASSERT_OK(xdevIpcOpenMemHandle(&q, h, 0));
  EXPECT_EQ(q, p + 4096);
  XDEV_ASSERT_OK(xdevIpcCloseMemHandle(q));
  XDEV_ASSERT_OK(xdevFree(p));
}

TEST(XdevIpc, HostMemoryAndMalformedHandlesAreRefused) {
  std::vector<char> host(4096);
  xdevIpcMemHandle_t h;
  EXPECT_EQ(xdevIpcGetMemHandle(&h, host.data()), xdevErrorInvalidDevicePointer);
  xdevGetLastError();
  void* pinned = nullptr;
  XDEV_ASSERT_OK(xdevHostAlloc(&pinned, 4096));
  EXPECT_EQ(xdevIpcGetMemHandle(&h, pinned), xdevErrorInvalidDevicePointer);
  xdevGetLastError();
  XDEV_ASSERT_OK(xdevFreeHost(pinned));
  xdevIpcMemHandle_t junk{};
  std::memset(junk.reserved, 0x41, sizeof(junk.reserved));
  void* q = nullptr;
  EXPECT_EQ(xdevIpcOpenMemHandle(&q, junk, 0), xdevErrorInvalidValue);
  xdevGetLastError();
  // A well-formed handle whose offset runs past its segment.
  char* p = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&p), 4096));
  XDEV_ASSERT_OK(xdevIpcGetMemHandle(&h, p));
  xdevIpcMemHandle_t bad = h;
  uint64_t segBytes = 0;
  std::memcpy(&segBytes, bad.reserved + 32, 8);
  std::memcpy(bad.reserved + 40, &segBytes, 8);  // offset = segment size
  EXPECT_EQ(xdevIpcOpenMemHandle(&q, bad, 0), xdevErrorInvalidValue);
  xdevGetLastError();
  XDEV_ASSERT_OK(xdevFree(p));
}

// Freed memory is reused, and a large freed range is given back to the OS (a hole) while
// the segment keeps its size, so a peer's mapping of it never faults.
TEST(XdevIpc, FreedMemoryIsReusedAndLargeRangesAreReleased) {
  char* a = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&a), 16 << 20));
  std::memset(a, 7, 16 << 20);
  XDEV_ASSERT_OK(xdevFree(a));
  char* b = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&b), 16 << 20));
  EXPECT_LE(b, a) << "first fit takes the freed range, or a free range before it";
  // The middle of the freed range was punched out: it reads as zeros now.
  if (a == b) EXPECT_EQ(b[8 << 20], 0);
  XDEV_ASSERT_OK(xdevFree(b));
}

// The child half of the cross-process test (skipped unless the parent runs it).
TEST(XdevIpc, ChildReadsAndWritesThroughAHandle) {
  const char* env = getenv("XDEV_IPC_TEST_HANDLE");
  if (env == nullptr) GTEST_SKIP() << "run by AnotherProcessReadsAndWritesInPlace";
  xdevIpcMemHandle_t h = unhex(env);
  unsigned char* p = nullptr;
  XDEV_ASSERT_OK(xdevIpcOpenMemHandle(reinterpret_cast<void**>(&p), h, 0));
  size_t left = 0;
  XDEV_ASSERT_OK(xdevIpcMemHandleGetSize(&h, &left));
  ASSERT_EQ(left, 3u << 20);
  for (size_t i = 0; i < left; i += 4093) ASSERT_EQ(p[i], static_cast<unsigned char>(i % 251));
  // Mapped here, the peer's memory is device memory of this process's current device (as
  // CUDA peer access): device copies take it, and torch tensors over it work on xdev.
  xdevPointerAttributes attr{};
  XDEV_ASSERT_OK(xdevPointerGetAttributes(&attr, p + 100));
  EXPECT_EQ(attr.type, xdevMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  std::vector<unsigned char> back(64);
  XDEV_ASSERT_OK(xdevMemcpy(back.data(), p + 4093, back.size(), xdevMemcpyDeviceToHost));
  EXPECT_EQ(back[0], static_cast<unsigned char>(4093 % 251));
  // It is not ours: neither freed nor shared again.
  EXPECT_EQ(xdevFree(p), xdevErrorInvalidDevicePointer);
  xdevIpcMemHandle_t again;
  EXPECT_EQ(xdevIpcGetMemHandle(&again, p), xdevErrorInvalidDevicePointer);
  EXPECT_NE(std::string(xdevGetLastErrorMessage()).find("another process"), std::string::npos)
      << xdevGetLastErrorMessage();
  std::memset(p, 0x5a, 4096);  // the owner sees it
}

TEST(XdevIpc, AnotherProcessReadsAndWritesInPlace) {
  unsigned char* p = nullptr;
  const size_t n = 3u << 20;
  XDEV_ASSERT_OK(xdevMalloc(reinterpret_cast<void**>(&p), n));
  std::vector<unsigned char> pattern(n);
  for (size_t i = 0; i < n; ++i) pattern[i] = static_cast<unsigned char>(i % 251);
  XDEV_ASSERT_OK(xdevMemcpy(p, pattern.data(), n, xdevMemcpyHostToDevice));
  xdevIpcMemHandle_t h;
  XDEV_ASSERT_OK(xdevIpcGetMemHandle(&h, p));
  int st =
      runChild("XdevIpc.ChildReadsAndWritesThroughAHandle", {"XDEV_IPC_TEST_HANDLE=" + hex(h)});
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
  EXPECT_EQ(p[0], 0x5a);
  EXPECT_EQ(p[4095], 0x5a);
  EXPECT_EQ(p[4096], static_cast<unsigned char>(4096 % 251));
  XDEV_ASSERT_OK(xdevFree(p));
}

// The child half: opening a handle of a process that has exited.
TEST(XdevIpc, ChildOpensAHandleOfAnExitedProcess) {
  const char* env = getenv("XDEV_IPC_TEST_DEAD_HANDLE");
  if (env == nullptr) GTEST_SKIP() << "run by AHandleOfAnExitedProcessIsRefused";
  void* q = nullptr;
  EXPECT_EQ(xdevIpcOpenMemHandle(&q, unhex(env), 0), xdevErrorInvalidResourceHandle);
  EXPECT_NE(std::string(xdevGetLastErrorMessage()).find("cannot open"), std::string::npos)
      << xdevGetLastErrorMessage();
}

// The child half: a process that makes a handle and exits, printing it.
TEST(XdevIpc, ChildPrintsAHandleAndExits) {
  if (getenv("XDEV_IPC_TEST_PRINT") == nullptr) GTEST_SKIP() << "run by the parent";
  void* p = nullptr;
  XDEV_ASSERT_OK(xdevMalloc(&p, 4096));
  xdevIpcMemHandle_t h;
  XDEV_ASSERT_OK(xdevIpcGetMemHandle(&h, p));
  FILE* f = fopen(getenv("XDEV_IPC_TEST_PRINT"), "w");
  ASSERT_NE(f, nullptr);
  fprintf(f, "%s", hex(h).c_str());
  fclose(f);
}

TEST(XdevIpc, AHandleOfAnExitedProcessIsRefused) {
  char path[] = "/tmp/xdev_ipc_handle_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  int st =
      runChild("XdevIpc.ChildPrintsAHandleAndExits", {std::string("XDEV_IPC_TEST_PRINT=") + path});
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  char buf[256] = {0};
  FILE* f = fopen(path, "r");
  ASSERT_NE(f, nullptr);
  ASSERT_NE(fgets(buf, sizeof(buf), f), nullptr);
  fclose(f);
  unlink(path);
  st = runChild("XdevIpc.ChildOpensAHandleOfAnExitedProcess",
                {std::string("XDEV_IPC_TEST_DEAD_HANDLE=") + buf});
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

}  // namespace
