// errnoString (error.h): no state.
#include <cstring>
#include <string>

#include "error.h"

namespace xccl {

std::string errnoString(int err) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return strCat(msg, " (errno ", err, ")");
}

}  // namespace xccl
