// Errors inside the xdev runtime: C++ exceptions carrying an xdevError_t, converted once at
// the C edge by api() into a return code plus this thread's last error and message.
//
//   XDEV_REQUIRE(ptr != nullptr, xdevErrorInvalidValue, "xdevMalloc: ptr is NULL");
//   return api("xdevMalloc", [&] { ...; return xdevSuccess; });
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "xdev_runtime.h"

namespace xdev {

using ::xccl::strCat;

class Failure : public std::runtime_error {
 public:
  Failure(xdevError_t code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  xdevError_t code() const { return code_; }

 private:
  xdevError_t code_;
};

// An enum argument as the caller passed it. A C caller may pass any int, and loading a value
// outside the enum's range through the enum type is undefined in C++, so arguments are read
// through this until they are checked.
template <typename Enum>
int rawValue(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Records a failure as this thread's last error and message; returns code. NotReady and
// Success are returned without being recorded.
xdevError_t recordError(xdevError_t code, const char* fn, const std::string& msg);

// Runs body (returning xdevError_t) and converts anything it throws into a return code.
template <typename Body>
xdevError_t api(const char* fn, Body&& body) noexcept {
  try {
    xdevError_t rc = body();
    return rc == xdevSuccess ? rc : recordError(rc, fn, xdevGetErrorString(rc));
  } catch (const Failure& e) {
    return recordError(e.code(), fn, e.what());
  } catch (const std::bad_alloc&) {
    return recordError(xdevErrorMemoryAllocation, fn, "out of host memory");
  } catch (const ::xccl::Error& e) {  // a malformed knob (common/param.h)
    return recordError(xdevErrorInvalidValue, fn, e.what());
  } catch (const std::exception& e) {
    return recordError(xdevErrorInternal, fn, e.what());
  } catch (...) {
    return recordError(xdevErrorInternal, fn, "unknown exception");
  }
}

}  // namespace xdev

#define XDEV_REQUIRE(cond, code, ...)                                        \
  do {                                                                       \
    if (!(cond)) throw ::xdev::Failure((code), ::xdev::strCat(__VA_ARGS__)); \
  } while (0)
