// FlightTriggers.cpp — when the flight recorder is dumped (FlightDump.hpp lists the
// triggers): a failure, timeout or abort of this process (once), a peer's request found in
// a store (a thread of its own), SIGUSR1 (a handler, a pipe and a thread), and telling the
// peers to dump too.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <c10/util/Exception.h>

#include "FlightDump.hpp"
#include "FlightJson.hpp"
#include "FlightRecorder.hpp"

namespace torch_xccl {
namespace flight {

namespace {

// In each group's store: a failing process's request to dump, and how many dumped.
constexpr const char* kPeerKey = "xccl_fr/dump";
constexpr const char* kDumpedKey = "xccl_fr/dumped";
constexpr auto kPeerCheck = std::chrono::seconds(1);  // how often a process looks for requests
constexpr auto kPeerWait = std::chrono::seconds(3);   // how long a failing one waits for peers

// Process-wide and never freed: the threads it starts live as long as the process.
struct Triggers {
  std::once_flag started;
  std::atomic<bool> autoDumped{false};  // the automatic dump happens once per process
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> exiting{false};
};

Triggers& triggers() {
  static Triggers* t = new Triggers();
  return *t;
}

// Read by the signal handler: plain lock-free atomics only.
std::atomic<int> gSignalPipe{-1};
std::atomic<pid_t> gSignalOwner{0};  // a forked child inherits the handler, not the thread

void onSignal(int) {
  const int saved = errno;
  const int fd = gSignalPipe.load(std::memory_order_relaxed);
  if (fd >= 0 && getpid() == gSignalOwner.load(std::memory_order_relaxed)) {
    const char c = 'S';
    ssize_t ignored = ::write(fd, &c, 1);  // non-blocking: a full pipe already asks for a dump
    (void)ignored;
  }
  errno = saved;
}

void log(const std::string& msg) {
  std::fprintf(stderr, "[torch_xccl] %s\n", msg.c_str());
  std::fflush(stderr);
}

void dumpAndLog(const std::string& reason) noexcept {
  try {
    std::string path = dump("", reason);
    log("flight recorder written to " + path + " (" + reason + ")");
  } catch (const std::exception& e) {
    log(std::string("flight recorder: could not write the dump (") + reason + "): " + e.what());
  }
}

void signalLoop(int fd) {
  char buf[64];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    dumpAndLog("SIGUSR1");  // several signals read at once make one dump
  }
}

void installSignal() {
  struct sigaction old {};
  if (sigaction(SIGUSR1, nullptr, &old) != 0) return;
  if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) return;  // someone's own
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  gSignalOwner.store(getpid());
  gSignalPipe.store(fds[1]);
  std::thread(signalLoop, fds[0]).detach();
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

// Telling the peers (the request and the count of dumps, in each group's store) happens on
// a thread of its own: the store lives in rank 0's process, which may be the very peer that
// is gone, or behind a cut link, and a store call there can block for minutes. The failing
// rank's error is raised at once, whatever the store does.
//
// At exit, a process that asked its peers to dump waits (at most kPeerWait in all) until
// every member of its groups has, so that its exit does not take the store away before the
// others saw the request; a store call that blocks does not hold the exit past kPeerWait.
struct Teller {
  std::mutex mu;
  std::condition_variable cv;
  bool done = true;
};

Teller& teller() {
  static Teller* t = new Teller();  // never freed: the thread may outlive static destruction
  return *t;
}

void waitForPeerDumps() {
  Teller& t = teller();
  std::unique_lock<std::mutex> lk(t.mu);
  t.cv.wait_for(lk, kPeerWait, [&] { return t.done; });
}

void tellPeers(std::vector<FlightGroup> groups, std::string request, bool askPeers) {
  std::vector<std::pair<c10::intrusive_ptr<c10d::Store>, int>> stores;
  for (const auto& g : groups) {
    if (auto store = g.store.lock()) stores.emplace_back(std::move(store), g.size);
  }
  for (auto& [store, size] : stores) {
    try {
      if (askPeers) store->set(kPeerKey, std::vector<uint8_t>(request.begin(), request.end()));
      store->add(kDumpedKey, 1);
    } catch (const std::exception&) {
      // a store that is gone (its host exited) has nobody left to tell
    }
  }
  if (askPeers) {
    const auto deadline = std::chrono::steady_clock::now() + kPeerWait;
    for (auto& [store, size] : stores) {
      try {
        while (store->add(kDumpedKey, 0) < size && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      } catch (const std::exception&) {
      }
    }
  }
  Teller& t = teller();
  {
    std::lock_guard<std::mutex> g(t.mu);
    t.done = true;
  }
  t.cv.notify_all();
}

// The automatic dump (failure, timeout, abort, a peer's request), once per process: the file
// now, then the peers told on a thread (tellPeers). Every process that makes it counts itself
// in each group's kDumpedKey; one that failed also sets kPeerKey there and, at exit, waits
// for the others (waitForPeerDumps).
void autoDump(const std::string& reason, bool askPeers) noexcept {
  Triggers& t = triggers();
  if (!FlightRecorder::get().enabled() || t.autoDumped.exchange(true)) return;
  dumpAndLog(reason);
  auto groups = FlightRecorder::get().groups();
  std::string request = "rank " + std::to_string(identity(groups).rank) + ": " + reason;
  {
    std::lock_guard<std::mutex> g(teller().mu);
    teller().done = false;
  }
  try {
    std::thread(tellPeers, std::move(groups), std::move(request), askPeers).detach();
  } catch (const std::exception&) {
    std::lock_guard<std::mutex> g(teller().mu);
    teller().done = true;
  }
  if (!askPeers) return;
  static std::once_flag atExit;
  std::call_once(atExit, [] { std::atexit(waitForPeerDumps); });
}

// Which store to look in this time: the default group's (every rank is a member, and a
// failing rank posts in all its groups), else the live groups' in turn. One request per
// second per process, however many groups it has.
c10::intrusive_ptr<c10d::Store> storeToCheck(size_t turn) {
  std::vector<c10::intrusive_ptr<c10d::Store>> live;
  for (const auto& g : FlightRecorder::get().groups()) {
    auto store = g.store.lock();
    if (!store) continue;
    if (g.ranks.empty()) return store;
    live.push_back(std::move(store));
  }
  return live.empty() ? nullptr : live[turn % live.size()];
}

// Looks for a peer's request. A thread of its own: a store call can wait behind another
// thread's long store wait (a rendezvous), and signals must not.
void peerLoop() {
  Triggers& t = triggers();
  for (size_t turn = 0;; ++turn) {
    {
      std::unique_lock<std::mutex> lk(t.mu);
      t.cv.wait_for(lk, kPeerCheck, [&] { return t.exiting.load(); });
    }
    if (t.exiting.load()) return;
    if (t.autoDumped.load()) continue;
    auto store = storeToCheck(turn);
    if (!store) continue;
    try {
      if (store->check({kPeerKey})) {
        auto v = store->get(kPeerKey);
        autoDump("asked by a peer: " + std::string(v.begin(), v.end()), false);
      }
    } catch (const std::exception&) {
      // the store's host is gone: nobody is left to ask
    }
  }
}

void startTriggers() {
  if (!FlightRecorder::get().enabled()) return;
  installSignal();
  std::thread(peerLoop).detach();
  std::atexit([] {
    Triggers& t = triggers();
    {
      std::lock_guard<std::mutex> g(t.mu);
      t.exiting.store(true);
    }
    t.cv.notify_all();
  });
}

std::string firstLine(const std::exception_ptr& error) {
  std::string s;
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    s = e.what_without_backtrace();
  } catch (const std::exception& e) {
    s = e.what();
  } catch (...) {
    s = "unknown error";
  }
  s = s.substr(0, s.find('\n'));
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

}  // namespace

uint32_t addGroup(const std::string& name, int rank, int size,
                  const std::vector<uint64_t>& globalRanks,
                  const c10::intrusive_ptr<c10d::Store>& store) {
  FlightGroup g;
  g.name = name;
  g.rank = rank;
  g.size = size;
  g.ranks = globalRanks;
  g.store = c10::weak_intrusive_ptr<c10d::Store>(store);
  uint32_t index = FlightRecorder::get().addGroup(std::move(g));
  std::call_once(triggers().started, startTriggers);
  return index;
}

void retire(uint64_t id, const std::exception_ptr& error, bool timedOut) noexcept {
  try {
    if (FlightRecorder::get().retire(id, error, timedOut) && error) {
      autoDump((timedOut ? "timeout: " : "failure: ") + firstLine(error), true);
    }
  } catch (...) {
    // the recorder must never fail an operation
  }
}

void aborted(const std::string& group) noexcept {
  try {
    autoDump("process group '" + group + "' aborted", true);
  } catch (...) {
  }
}

}  // namespace flight
}  // namespace torch_xccl
