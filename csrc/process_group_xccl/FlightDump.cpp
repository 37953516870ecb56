// FlightDump.cpp — the flight recorder's dump: its JSON, its file, and what triggers it
// (FlightDump.hpp lists the triggers; docs/RELIABILITY.md, "Flight recorder", the format).
#include "FlightDump.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <thread>

#include <c10/util/Exception.h>
#include <torch/version.h>

#include "FlightRecorder.hpp"
#include "xccl.h"

namespace torch_xccl {
namespace flight {

namespace {

constexpr const char* kFormatVersion = "1.0";
// In each group's store: a failing process's request to dump, and how many dumped.
constexpr const char* kPeerKey = "xccl_fr/dump";
constexpr const char* kDumpedKey = "xccl_fr/dumped";
constexpr auto kPeerCheck = std::chrono::seconds(1);  // how often a process looks for requests
constexpr auto kPeerWait = std::chrono::seconds(3);   // how long a failing one waits for peers

// ---------------------------------------------------------------- who this process is

struct Identity {
  long long rank = -1;  // global; -1: not known
  long long worldSize = -1;
};

long long envNumber(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  return end != v && *end == '\0' ? n : -1;
}

// The default group (no global ranks: they are its own) knows best; then the launcher's
// environment; then any group's list of global ranks.
Identity identity(const std::vector<FlightGroup>& groups) {
  Identity id;
  for (const auto& g : groups) {
    if (g.ranks.empty()) return Identity{g.rank, g.size};
  }
  id.rank = envNumber("RANK");
  id.worldSize = envNumber("WORLD_SIZE");
  if (id.rank < 0) {
    for (const auto& g : groups) {
      if (g.rank >= 0 && static_cast<size_t>(g.rank) < g.ranks.size()) {
        id.rank = static_cast<long long>(g.ranks[g.rank]);
        break;
      }
    }
  }
  return id;
}

std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// ---------------------------------------------------------------- JSON

void str(std::ostream& os, const std::string& s) {
  os << '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        os << "\\\"";
        break;
      case '\\':
        os << "\\\\";
        break;
      case '\n':
        os << "\\n";
        break;
      case '\r':
        os << "\\r";
        break;
      case '\t':
        os << "\\t";
        break;
      default:
        if (c < 0x20) {
          os << "\\u" << std::hex << std::setw(4) << std::setfill('0') << static_cast<int>(c)
             << std::dec << std::setfill(' ');
        } else {
          os << c;
        }
    }
  }
  os << '"';
}

void nsOrNull(std::ostream& os, int64_t ns) {
  if (ns == 0) {
    os << "null";
  } else {
    os << ns;
  }
}

void msOrNull(std::ostream& os, int64_t from, int64_t to) {
  if (from == 0 || to == 0) {
    os << "null";
  } else {
    os << std::fixed << std::setprecision(3) << static_cast<double>(to - from) / 1e6;
    os.unsetf(std::ios::floatfield);
  }
}

// "input_sizes": [[8, 2]], "input_dtypes": ["float32"], then the same for the outputs.
void tensors(std::ostream& os, const FlightEntry& e) {
  size_t dim = 0;
  const size_t n = e.ndims.size();
  std::ostringstream dtypes;
  for (int side = 0; side < 2; ++side) {
    const size_t from = side == 0 ? 0 : e.nInputs;
    const size_t to = side == 0 ? e.nInputs : n;
    os << (side == 0 ? "\"input_sizes\": [" : ", \"output_sizes\": [");
    dtypes.str("");
    for (size_t i = from; i < to; ++i) {
      os << (i > from ? ", [" : "[");
      for (size_t d = 0; d < e.ndims[i]; ++d) os << (d > 0 ? ", " : "") << e.dims[dim++];
      os << "]";
      dtypes << (i > from ? ", \"" : "\"") << flightDtypeName(e.dtypes[i]) << "\"";
    }
    os << "], " << (side == 0 ? "\"input_dtypes\": [" : "\"output_dtypes\": [") << dtypes.str()
       << "]";
  }
}

void entry(std::ostream& os, const FlightEntry& e, const std::vector<FlightGroup>& groups) {
  const FlightGroup* g = e.group < groups.size() ? &groups[e.group] : nullptr;
  os << "{\"id\": " << e.id << ", \"group\": ";
  str(os, g != nullptr ? g->name : std::string("?"));
  os << ", \"group_rank\": " << (g != nullptr ? g->rank : -1) << ", \"op\": ";
  str(os, e.op);
  os << ", \"is_p2p\": " << (e.p2p ? "true" : "false")
     << ", \"collective_seq\": " << (e.p2p ? 0 : e.seq) << ", \"p2p_seq\": " << (e.p2p ? e.seq : 0)
     << ", \"op_seq\": " << e.opSeq << ", \"device\": ";
  str(os, e.device.str());
  os << ", \"state\": \"" << flightStateName(e.state) << "\", ";
  tensors(os, e);
  os << ", \"time_enqueued_ns\": ";
  nsOrNull(os, e.tEnqueued);
  os << ", \"time_started_ns\": ";
  nsOrNull(os, e.tStarted);
  os << ", \"time_ended_ns\": ";
  nsOrNull(os, e.tEnded);
  os << ", \"queued_ms\": ";
  msOrNull(os, e.tEnqueued, e.tStarted);
  os << ", \"duration_ms\": ";
  msOrNull(os, e.tStarted, e.tEnded);
  os << ", \"timeout_ms\": " << e.timeoutMs << ", \"error\": ";
  if (e.error.empty()) {
    os << "null";
  } else {
    str(os, e.error);
  }
  os << "}";
}

std::string versionString(int code) {
  return std::to_string(code / 10000) + "." + std::to_string((code / 100) % 100) + "." +
         std::to_string(code % 100);
}

std::string fileName(const Identity& id) {
  if (id.rank >= 0) return "rank_" + std::to_string(id.rank) + ".json";
  return "pid_" + std::to_string(static_cast<long long>(getpid())) + ".json";
}

// ---------------------------------------------------------------- files

void makeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      TORCH_CHECK(false, "xccl flight recorder: cannot create directory '", part,
                  "': ", std::strerror(errno));
    }
  }
}

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string traceDir() {
  const char* dir = std::getenv("TORCH_XCCL_TRACE_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  std::string job = "default";
  for (const char* name : {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0' && std::string(v) != "none") {
      job = v;
      break;
    }
  }
  return "/tmp/xccl_trace/" + job;
}

// ---------------------------------------------------------------- triggers

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

std::string json(const std::string& reason) {
  FlightSnapshot s = FlightRecorder::get().snapshot();
  Identity id = identity(s.groups);
  int xv = 0;
  std::string xcclVersion = xcclGetVersion(&xv) == xcclSuccess ? versionString(xv) : "unknown";
  std::ostringstream os;
  os << "{\"version\": \"" << kFormatVersion << "\", \"xccl_version\": \"" << xcclVersion
     << "\", \"torch_version\": \"" << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << "."
     << TORCH_VERSION_PATCH << "\", \"rank\": " << id.rank << ", \"world_size\": " << id.worldSize
     << ", \"pid\": " << static_cast<long long>(getpid()) << ", \"hostname\": ";
  str(os, hostName());
  os << ", \"reason\": ";
  str(os, reason);
  os << ", \"time_ns\": " << s.tNow << ", \"buffer_size\": " << s.capacity
     << ", \"recorded\": " << s.recorded << ",\n \"groups\": [";
  for (size_t i = 0; i < s.groups.size(); ++i) {
    const FlightGroup& g = s.groups[i];
    os << (i > 0 ? ",\n  " : "\n  ") << "{\"name\": ";
    str(os, g.name);
    os << ", \"rank\": " << g.rank << ", \"size\": " << g.size << ", \"ranks\": [";
    for (int r = 0; r < g.size; ++r) {
      os << (r > 0 ? ", " : "") << (g.ranks.empty() ? static_cast<uint64_t>(r) : g.ranks[r]);
    }
    os << "]}";
  }
  os << "],\n \"entries\": [";
  for (size_t i = 0; i < s.entries.size(); ++i) {
    os << (i > 0 ? ",\n  " : "\n  ");
    entry(os, s.entries[i], s.groups);
  }
  os << "]}\n";
  return os.str();
}

std::string defaultPath() {
  return traceDir() + "/" + fileName(identity(FlightRecorder::get().groups()));
}

std::string dump(const std::string& path, const std::string& reason) {
  std::string target = path.empty() ? defaultPath() : path;
  if (!path.empty() && (isDirectory(path) || path.back() == '/')) {
    target =
        path + (path.back() == '/' ? "" : "/") + fileName(identity(FlightRecorder::get().groups()));
  }
  const size_t slash = target.rfind('/');
  if (slash != std::string::npos && slash > 0) makeDirs(target.substr(0, slash));
  const std::string text = json(reason);
  const std::string tmp = target + ".tmp" + std::to_string(static_cast<long long>(getpid()));
  {
    std::ofstream f(tmp, std::ios::trunc);
    TORCH_CHECK(f.good(), "xccl flight recorder: cannot write '", tmp, "': ", std::strerror(errno));
    f << text;
    f.close();
    TORCH_CHECK(!f.fail(), "xccl flight recorder: writing '", tmp, "' failed");
  }
  TORCH_CHECK(::rename(tmp.c_str(), target.c_str()) == 0, "xccl flight recorder: cannot rename '",
              tmp, "' to '", target, "': ", std::strerror(errno));
  return target;
}

}  // namespace flight
}  // namespace torch_xccl
