// The strict knob readers behind XCCL_PARAM (param.h). The only state: which knobs were
// reported as set, and where reports go.
#include "param.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "error.h"

namespace xccl {

namespace {

std::atomic<void (*)(const std::string&)> gReporter{nullptr};

// Reports `var`=`value` once per process when it is not the default.
void reportSet(const std::string& var, const std::string& value, const std::string& deflt) {
  auto* report = gReporter.load(std::memory_order_acquire);
  if (report == nullptr || value == deflt) return;
  static std::mutex mu;
  static std::set<std::string>* reported = new std::set<std::string>();  // never freed: static
                                                                         // destruction may read
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!reported->insert(var).second) return;
  }
  report(strCat(var, "=", value, " (default ", deflt.empty() ? "unset" : deflt, ")"));
}

}  // namespace

void setKnobReporter(void (*report)(const std::string& line)) {
  gReporter.store(report, std::memory_order_release);
}

int64_t readIntParam(const char* name, int64_t deflt, int64_t lo, int64_t hi) {
  std::string var = std::string("XCCL_") + name;
  const char* v = getenv(var.c_str());
  if (v == nullptr || *v == '\0') return deflt;
  char* end = nullptr;
  errno = 0;
  long long x = strtoll(v, &end, 0);
  if (errno != 0 || end == v || *end != '\0') {
    throw InvalidUsage(strCat(var, "='", v, "' is not an integer"));
  }
  if (x < lo || x > hi) {
    throw InvalidUsage(hi == kKnobMax ? strCat(var, "=", x, " is out of range: at least ", lo)
                       : lo == kKnobMin
                           ? strCat(var, "=", x, " is out of range: at most ", hi)
                           : strCat(var, "=", x, " is out of range: ", lo, " to ", hi));
  }
  reportSet(var, std::to_string(x), std::to_string(deflt));
  return x;
}

std::string readStrParam(const char* name, const char* deflt) {
  std::string var = std::string("XCCL_") + name;
  const char* v = getenv(var.c_str());
  if (v == nullptr || *v == '\0') return std::string(deflt);
  reportSet(var, v, deflt);
  return std::string(v);
}

}  // namespace xccl
