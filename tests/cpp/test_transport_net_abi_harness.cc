// The worker harness of the network plugin ABI suite: see net_abi_harness.h.
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>

#include "net_abi_harness.h"
#include "xccl_net.h"

namespace xccl_net_abi_test {

const xcclNet_v1_t* libfabricTable(std::string* why) {
#ifndef XCCL_NET_LIBFABRIC_PATH
  *why = "XCCL_NET_LIBFABRIC_PATH is not defined: the libfabric plugin is not built";
  return nullptr;
#else
  const char* path = XCCL_NET_LIBFABRIC_PATH;
  if (access(path, R_OK) != 0) {
    *why = std::string(path) + " does not exist";
    return nullptr;
  }
  // dlopen only loads it; nothing of libfabric starts until init(), which only workers call.
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    *why = std::string("dlopen: ") + dlerror();
    return nullptr;
  }
  auto* t = static_cast<const xcclNet_v1_t*>(dlsym(lib, XCCL_NET_PLUGIN_SYMBOL));
  if (t == nullptr) *why = std::string(path) + " has no " XCCL_NET_PLUGIN_SYMBOL;
  return t;
#endif
}

// ---- inside a worker ----

const char* gRole = "?";

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void workerFail(const char* file, int line, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "[worker %s] %s:%d: %s\n", gRole, file, line, msg);
  fflush(stderr);
  _exit(1);
}

void testLogger(xcclNetLogLevel_t level, const char* fmt, ...) {
  static const bool verbose = getenv("XCCL_TEST_NET_VERBOSE") != nullptr;
  if (level > XCCL_NET_LOG_INFO && !verbose) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "[worker %s] net %s: %s\n", gRole,
          level == XCCL_NET_LOG_WARN   ? "WARN"
          : level == XCCL_NET_LOG_INFO ? "INFO"
                                       : "TRACE",
          msg);
}

xcclResult_t waitReq(const xcclNet_v1_t* net, void* req, size_t* size, double seconds) {
  double end = nowSec() + seconds;
  for (;;) {
    int done = 0;
    xcclResult_t r = net->test(req, &done, size);
    if (r != xcclSuccess || done) return r;
    WORKER_CHECK(nowSec() < end, "a request not done after %.0f s", seconds);
  }
}

// isend or irecv, called again until the table takes the request.
void* post(const xcclNet_v1_t* net, bool send, void* comm, void* data, size_t n, void* mh) {
  void* req = nullptr;
  spin(
      [&] {
        WORKER_OK(send ? net->isend(comm, data, n, mh, &req) : net->irecv(comm, data, n, mh, &req));
        return req != nullptr;
      },
      30, send ? "isend to take the request" : "irecv to take the request");
  return req;
}

void* postSend(const xcclNet_v1_t* net, void* comm, void* data, size_t n, void* mh) {
  return post(net, true, comm, data, n, mh);
}

void* postRecv(const xcclNet_v1_t* net, void* comm, void* data, size_t n, void* mh) {
  return post(net, false, comm, data, n, mh);
}

void* regHost(const xcclNet_v1_t* net, void* comm, void* p, size_t n) {
  void* mh = nullptr;
  WORKER_OK(net->regMr(comm, p, n, XCCL_NET_PTR_HOST, &mh));
  WORKER_CHECK(mh != nullptr, "regMr gave a NULL handle");
  return mh;
}

void connectAccept(const xcclNet_v1_t* net, const void* handle, void** send, void* listen,
                   void** recv) {
  if (send != nullptr) *send = nullptr;
  if (recv != nullptr) *recv = nullptr;
  spin(
      [&] {
        if (send != nullptr && *send == nullptr) WORKER_OK(net->connect(0, handle, send));
        if (recv != nullptr && *recv == nullptr) WORKER_OK(net->accept(listen, recv));
        return (send == nullptr || *send != nullptr) && (recv == nullptr || *recv != nullptr);
      },
      30, "connect/accept");
}

xcclNetProperties_v1_t startNet(const Worker& w) {
  WORKER_OK(w.net->init(testLogger));
  int ndev = 0;
  WORKER_OK(w.net->devices(&ndev));
  WORKER_CHECK(ndev >= 1, "no device (ndev %d)", ndev);
  xcclNetProperties_v1_t props;
  memset(&props, 0, sizeof(props));
  WORKER_OK(w.net->getProperties(0, &props));
  WORKER_CHECK(props.name[0] != '\0', "empty device name");
  WORKER_CHECK((props.ptrSupport & XCCL_NET_PTR_HOST) != 0, "no host memory support");
  WORKER_CHECK(props.maxMessageBytes > 0, "maxMessageBytes is 0");
  return props;
}

void* listenAndSwap(const Worker& w, char (&mine)[XCCL_NET_HANDLE_MAXSIZE],
                    char (&theirs)[XCCL_NET_HANDLE_MAXSIZE]) {
  void* listen = nullptr;
  WORKER_OK(w.net->listen(0, mine, &listen));
  WORKER_CHECK(listen != nullptr, "listen gave no comm");
  w.put(mine, sizeof(mine));
  w.get(theirs, sizeof(theirs));
  return listen;
}

namespace {

// Byte j of message i: depends on both, so a lost, duplicated, reordered or shifted message
// shows.
inline uint8_t pattern(uint64_t i, size_t j) {
  return static_cast<uint8_t>(i * 131 + j * 7 + (j >> 9) + 1);
}

}  // namespace

void fill(uint8_t* p, uint64_t i, size_t n) {
  for (size_t j = 0; j < n; j++) p[j] = pattern(i, j);
}
bool matches(const uint8_t* p, uint64_t i, size_t n, size_t* bad) {
  for (size_t j = 0; j < n; j++)
    if (p[j] != pattern(i, j)) {
      *bad = j;
      return false;
    }
  return true;
}

// ---- in the test process ----

void runPair(const NetCase& nc, const WorkerFn& a, const WorkerFn& b, int seconds,
             const std::function<void(pid_t, pid_t, int)>& parent, bool bMayDie) {
  int ab[2], ba[2], ap[2];
  ASSERT_EQ(pipe(ab), 0);
  ASSERT_EQ(pipe(ba), 0);
  ASSERT_EQ(pipe(ap), 0);
  fflush(stdout);
  fflush(stderr);
  auto start = [&](const char* role, const WorkerFn& fn, int toPeer, int fromPeer) -> pid_t {
    pid_t pid = fork();
    if (pid != 0) return pid;
    gRole = role;
    // The worker's own limit, a little past the test process's: it dies if both fail.
    alarm(static_cast<unsigned>(seconds) + 5);
    std::string why;
    Worker w{nc.table(&why), toPeer, fromPeer, ap[1]};
    WORKER_CHECK(w.net != nullptr, "no table: %s", why.c_str());
    fn(w);
    fflush(stderr);
    _exit(0);
  };
  pid_t pa = start("A", a, ab[1], ba[0]);
  pid_t pb = start("B", b, ba[1], ab[0]);
  ASSERT_GT(pa, 0);
  ASSERT_GT(pb, 0);
  close(ab[0]);
  close(ab[1]);
  close(ba[0]);
  close(ba[1]);
  close(ap[1]);
  if (parent) parent(pa, pb, ap[0]);
  close(ap[0]);

  double end = nowSec() + seconds;
  int statusA = -1, statusB = -1;
  while ((statusA == -1 || statusB == -1) && nowSec() < end) {
    int st;
    if (statusA == -1 && waitpid(pa, &st, WNOHANG) == pa) statusA = st;
    if (statusB == -1 && waitpid(pb, &st, WNOHANG) == pb) statusB = st;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto [pid, status, name] :
       {std::make_tuple(pa, &statusA, "A"), std::make_tuple(pb, &statusB, "B")}) {
    if (*status != -1) continue;
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    ADD_FAILURE() << "worker " << name << " still running after " << seconds << " s: killed";
    *status = -2;
  }
  auto ok = [](int st) { return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0; };
  EXPECT_TRUE(statusA == -2 || ok(statusA)) << "worker A failed (status " << statusA << ")";
  if (!bMayDie) {
    EXPECT_TRUE(statusB == -2 || ok(statusB)) << "worker B failed (status " << statusB << ")";
  }
}

bool readByte(int fd, double seconds) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(seconds * 1000)) != 1) return false;
  char c;
  return read(fd, &c, 1) == 1;
}

}  // namespace xccl_net_abi_test
