// libxdev's reporting (report.h).
#include "report.h"

#include "common/param.h"

#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace xdev {

namespace {

enum Level { kNone = 0, kWarn = 1, kInfo = 2 };

Level level() {
  static const Level lvl = [] {
    const char* v = getenv("XCCL_DEBUG");
    if (v == nullptr || *v == '\0') return kWarn;
    if (strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0) return kInfo;
    if (strcasecmp(v, "NONE") == 0 || strcmp(v, "0") == 0) return kNone;
    return kWarn;
  }();
  return lvl;
}

void write(const char* what, const std::string& msg) {
  static std::mutex mu;
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  if (char* dot = strchr(host, '.')) *dot = '\0';
  std::lock_guard<std::mutex> lock(mu);
  fprintf(stderr, "%s:%d xdev %s %s\n", host, getpid(), what, msg.c_str());
  fflush(stderr);
}

}  // namespace

bool reportInfoEnabled() { return level() >= kInfo; }

void reportWarn(const std::string& msg) {
  if (level() >= kWarn) write("WARN", msg);
}

void reportInfo(const std::string& msg) {
  if (level() >= kInfo) write("INFO", msg);
}

namespace {
// xdev's knobs set to other than their defaults: one INFO line each (common/param.h).
void reportKnob(const std::string& line) { reportInfo("knob " + line); }
const bool kKnobsReported = (xccl::setKnobReporter(reportKnob), true);
}  // namespace

}  // namespace xdev
