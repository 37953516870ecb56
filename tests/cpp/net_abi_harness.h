// The worker harness of the network plugin ABI suite (test_transport_net_abi.cc), which
// exercises any xcclNet_v1_t through its table only.
//
// Every case runs its peers as two forked worker processes, A and B, which load and init the
// table themselves: a plugin's process-wide state (its endpoint, a provider's threads) must
// not be inherited through fork, and the test process must stay clean for the next case. The
// workers talk through pipes (listen handles, barriers); the test process only watches them
// under a hard deadline, kills them when it passes, and, in the death cases, kills a peer.
// Every network address in use is 127.0.0.1: FI_TCP_IFACE=lo, XCCL_NET_LIBFABRIC_IFACE=lo and
// XCCL_SOCKET_IFNAME==lo are set before the workers start. XCCL_TEST_NET_VERBOSE=1 shows the
// plugin's TRACE lines.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "xccl_net.h"

namespace xccl_net_abi_test {

// One table under test: its name, and a function that returns it (nullptr with *why saying
// why it is not available in this build).
struct NetCase {
  const char* name;
  const xcclNet_v1_t* (*table)(std::string* why);
};

// The libfabric plugin's table, loaded with dlopen from XCCL_NET_LIBFABRIC_PATH.
const xcclNet_v1_t* libfabricTable(std::string* why);

// ---- inside a worker ----

extern const char* gRole;  // "A" or "B", for messages

// Seconds on the steady clock.
double nowSec();

// Worker checks: a failure prints where and why and ends the worker with status 1, which the
// test process reports. (GoogleTest's assertions belong to the test process.)
[[noreturn]] void workerFail(const char* file, int line, const char* fmt, ...);
#define WORKER_CHECK(cond, ...)                                                           \
  do {                                                                                    \
    if (!(cond)) workerFail(__FILE__, __LINE__, "check failed: " #cond ": " __VA_ARGS__); \
  } while (0)
#define WORKER_OK(expr)                                                             \
  do {                                                                              \
    xcclResult_t r_ = (expr);                                                       \
    WORKER_CHECK(r_ == xcclSuccess, "%s returned %d", #expr, static_cast<int>(r_)); \
  } while (0)

// The plugin's logger in a worker: WARN and INFO lines, TRACE too with XCCL_TEST_NET_VERBOSE.
void testLogger(xcclNetLogLevel_t level, const char* fmt, ...);

// A worker's view: the table, and pipes to the other worker and to the test process.
struct Worker {
  const xcclNet_v1_t* net;
  int toPeer;
  int fromPeer;
  int toParent;

  void put(const void* p, size_t n) const {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t k = write(toPeer, c, n);
      WORKER_CHECK(k > 0 || errno == EINTR, "pipe write: %s", strerror(errno));
      if (k > 0) c += k, n -= static_cast<size_t>(k);
    }
  }
  void get(void* p, size_t n) const {
    char* c = static_cast<char*>(p);
    while (n > 0) {
      ssize_t k = read(fromPeer, c, n);
      WORKER_CHECK(k > 0 || (k < 0 && errno == EINTR), "pipe read: peer gone");
      if (k > 0) c += k, n -= static_cast<size_t>(k);
    }
  }
  // Both workers have reached this point.
  void barrier() const {
    char b = 'b';
    put(&b, 1);
    get(&b, 1);
  }
  void tellParent() const {
    char b = 'r';
    WORKER_CHECK(write(toParent, &b, 1) == 1, "pipe to parent");
  }
};

// Calls step() until it returns true; a worker that waits longer than `seconds` fails.
template <class F>
void spin(F step, double seconds, const char* what) {
  double end = nowSec() + seconds;
  while (!step()) {
    WORKER_CHECK(nowSec() < end, "timed out after %.0f s waiting for %s", seconds, what);
  }
}

// Tests until done; returns the result (the request is freed once done is reported).
xcclResult_t waitReq(const xcclNet_v1_t* net, void* req, size_t* size, double seconds);

// isend / irecv, posted again until the table takes the request (it may answer "no room yet").
void* postSend(const xcclNet_v1_t* net, void* comm, void* data, size_t n, void* mh);
void* postRecv(const xcclNet_v1_t* net, void* comm, void* data, size_t n, void* mh);

// Registers host memory for transfers on `comm`: the ABI has callers register every buffer
// (a plugin without registration returns a token). Workers exit without deregistering these.
void* regHost(const xcclNet_v1_t* net, void* comm, void* p, size_t n);

// Connects to `handle` and accepts on `listen` at once (the peer does the same or the
// mirror), calling each again until it yields its comm. Either pointer may be skipped.
void connectAccept(const xcclNet_v1_t* net, const void* handle, void** send, void* listen,
                   void** recv);

// The workers' common start: init, a device with sane properties.
xcclNetProperties_v1_t startNet(const Worker& w);

// Listens and swaps handles with the peer.
void* listenAndSwap(const Worker& w, char (&mine)[XCCL_NET_HANDLE_MAXSIZE],
                    char (&theirs)[XCCL_NET_HANDLE_MAXSIZE]);

// Message i's bytes: byte j depends on both i and j, so a lost, duplicated, reordered or
// shifted message shows. matches() gives the first wrong byte in *bad.
void fill(uint8_t* p, uint64_t i, size_t n);
bool matches(const uint8_t* p, uint64_t i, size_t n, size_t* bad);

// ---- in the test process ----

using WorkerFn = std::function<void(Worker&)>;

// Runs A and B as processes under a hard deadline. `parent` (optional) runs in the test
// process with A's pid, B's pid and the read end of A's pipe to it. `bMayDie`: B's being
// killed is part of the case.
void runPair(const NetCase& nc, const WorkerFn& a, const WorkerFn& b, int seconds,
             const std::function<void(pid_t, pid_t, int)>& parent = nullptr, bool bMayDie = false);

// Waits (bounded) for one byte from a worker.
bool readByte(int fd, double seconds);

class NetAbi : public testing::TestWithParam<NetCase> {
 protected:
  void SetUp() override {
    // 127.0.0.1 only, whatever the machine has.
    setenv("FI_TCP_IFACE", "lo", 1);
    setenv("XCCL_NET_LIBFABRIC_IFACE", "lo", 1);
    setenv("XCCL_SOCKET_IFNAME", "=lo", 1);  // the socket table
    std::string why;
    if (GetParam().table(&why) == nullptr) GTEST_SKIP() << GetParam().name << ": " << why;
  }
};

}  // namespace xccl_net_abi_test
