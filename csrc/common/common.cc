// Implementations behind error.h, param.h, log.h and clock.h.
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "param.h"

namespace xccl {

std::string errnoString(int err) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return strCat(msg, " (errno ", err, ")");
}

// ---- knobs ----

int64_t readIntParam(const char* name, int64_t deflt) {
  std::string var = std::string("XCCL_") + name;
  const char* v = getenv(var.c_str());
  if (v == nullptr || *v == '\0') return deflt;
  char* end = nullptr;
  errno = 0;
  long long x = strtoll(v, &end, 0);
  if (errno != 0 || end == v || *end != '\0') {
    throw InvalidUsage(strCat(var, "='", v, "' is not an integer"));
  }
  return x;
}

std::string readStrParam(const char* name, const char* deflt) {
  std::string var = std::string("XCCL_") + name;
  const char* v = getenv(var.c_str());
  return (v == nullptr || *v == '\0') ? std::string(deflt) : std::string(v);
}

// ---- logging ----

namespace {

struct LogConfig {
  LogLevel level = LogLevel::kWarn;
  unsigned subsys = ALLSUBSYS;
  FILE* out = stderr;
  char host[64] = "?";
};

unsigned parseSubsys(const std::string& spec) {
  if (spec.empty()) return ALLSUBSYS;
  struct {
    const char* name;
    unsigned bit;
  } names[] = {{"INIT", INIT}, {"COLL", COLL}, {"SHM", SHM},      {"NET", NET},
               {"TOPO", TOPO}, {"BOOT", BOOT}, {"ALL", ALLSUBSYS}};
  unsigned mask = 0;
  bool negate = spec[0] == '^';  // "^COLL" = everything but COLL
  size_t pos = negate ? 1 : 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string tok =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    for (auto& n : names) {
      if (strcasecmp(tok.c_str(), n.name) == 0) mask |= n.bit;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return negate ? ~mask : mask;
}

std::string expandPath(std::string path, const char* host) {
  for (size_t i; (i = path.find("%h")) != std::string::npos;) path.replace(i, 2, host);
  for (size_t i; (i = path.find("%p")) != std::string::npos;) {
    path.replace(i, 2, std::to_string(getpid()));
  }
  return path;
}

LogConfig& logConfig() {
  static LogConfig* cfg = [] {
    auto* c = new LogConfig();  // never freed: logging must work during static destruction
    gethostname(c->host, sizeof(c->host) - 1);
    if (char* dot = strchr(c->host, '.')) *dot = '\0';
    const char* lvl = getenv("XCCL_DEBUG");
    if (lvl && *lvl) {
      if (strcasecmp(lvl, "VERSION") == 0 || strcasecmp(lvl, "WARN") == 0) {
        c->level = LogLevel::kWarn;
      } else if (strcasecmp(lvl, "INFO") == 0) {
        c->level = LogLevel::kInfo;
      } else if (strcasecmp(lvl, "TRACE") == 0) {
        c->level = LogLevel::kTrace;
      } else if (strcasecmp(lvl, "NONE") == 0 || strcmp(lvl, "0") == 0) {
        c->level = LogLevel::kNone;
      }
    }
    const char* sub = getenv("XCCL_DEBUG_SUBSYS");
    c->subsys = parseSubsys(sub ? sub : "");
    const char* file = getenv("XCCL_DEBUG_FILE");
    if (file && *file) {
      FILE* f = fopen(expandPath(file, c->host).c_str(), "a");
      if (f) {
        setvbuf(f, nullptr, _IOLBF, 0);
        c->out = f;
      }
    }
    return c;
  }();
  return *cfg;
}

thread_local int tlsLogRank = -1;
std::mutex logMutex;

const char* levelName(LogLevel l) {
  switch (l) {
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kTrace:
      return "TRACE";
    default:
      return "";
  }
}

}  // namespace

bool logEnabled(LogLevel level, unsigned subsys) {
  const LogConfig& c = logConfig();
  return static_cast<int>(level) <= static_cast<int>(c.level) && (c.subsys & subsys) != 0;
}

void logWrite(LogLevel level, unsigned subsys, const std::string& msg) {
  LogConfig& c = logConfig();
  long tid = syscall(SYS_gettid);
  std::lock_guard<std::mutex> lock(logMutex);
  if (tlsLogRank >= 0) {
    fprintf(c.out, "%s:%d:%ld [%d] XCCL %s %s\n", c.host, getpid(), tid, tlsLogRank,
            levelName(level), msg.c_str());
  } else {
    fprintf(c.out, "%s:%d:%ld XCCL %s %s\n", c.host, getpid(), tid, levelName(level), msg.c_str());
  }
  fflush(c.out);
}

void setLogRank(int rank) { tlsLogRank = rank; }

// ---- backoff ----

void Backoff::idle() {
  // Spin briefly (latency), then yield (the other core may be running our peer), then
  // nap (oversubscribed machines: ranks x progress threads > cores).
  ++n_;
  if (n_ < 64) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    return;
  }
  if (n_ == 64) idleSince_ = Clock::now();
  if (!napping_) {
    // Until 1 ms without progress has passed: yield (the clock is read every 256 polls).
    if (n_ % 256 != 0 || Clock::now() - idleSince_ < std::chrono::milliseconds(1)) {
      sched_yield();
      return;
    }
    napping_ = true;
  }
  const bool longIdle = Clock::now() - idleSince_ > std::chrono::milliseconds(20);
  struct timespec ts = {0, longIdle ? 200000 : 20000};  // 20 us naps, 200 us after 20 ms
  nanosleep(&ts, nullptr);
}

}  // namespace xccl
