// The strict knob readers behind XCCL_PARAM (param.h): no state; each call reads the
// environment.
#include <cerrno>
#include <cstdlib>
#include <string>

#include "error.h"
#include "param.h"

namespace xccl {

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

}  // namespace xccl
