// The logger (log.h): the process's one logging state. Compiled into libxccl only; libxdev
// reports through its own few lines (csrc/xdev/report.cc), so no process has two of these.
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "log.h"
#include "param.h"

namespace xccl {

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

namespace {
// Knobs set to other than their defaults: one INFO line each (common/param.h).
void reportKnob(const std::string& line) { XCCL_INFO(INIT, "knob ", line); }
const bool kKnobsReported = (setKnobReporter(reportKnob), true);
}  // namespace

}  // namespace xccl
