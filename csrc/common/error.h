// Error idiom of the core: C++ exceptions inside, xcclResult_t at the API edge.
//
//   XCCL_CHECK(cond, "count ", n, " exceeds ", cap)   -> throws xccl::InvalidUsage
//   throw xccl::IoError(...), Timeout(...), RemoteError(...) for the rest.
//
// Every exception carries a kind; the API edge converts it once into an xcclResult_t
// (collectives/core/result.h) and remembers the message for xcclGetLastError. common/ sits
// below every library (libxdev included), so it knows nothing of xccl.h.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace xccl {

// What went wrong. The numbers are xcclResult_t's, which core/result.h checks at compile time.
enum class ErrorKind : int {
  kUnhandled = 1,        // an internal bug or an unexpected system failure
  kSystem = 2,           // a system call failed
  kInternal = 3,         // an invariant broke inside the library
  kInvalidArgument = 4,  // a bad argument from the caller
  kInvalidUsage = 5,     // a call not allowed in this state
  kRemote = 6,           // a peer failed, died, closed or sent bad data
  kTimeout = 8,          // a wait ran past its deadline
};

template <typename... Args>
std::string strCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Bad arguments or calls in the wrong state.
class InvalidUsage : public Error {
 public:
  explicit InvalidUsage(const std::string& m) : Error(ErrorKind::kInvalidUsage, m) {}
};
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& m) : Error(ErrorKind::kInvalidArgument, m) {}
};
// A local system call failed.
class IoError : public Error {
 public:
  explicit IoError(const std::string& m) : Error(ErrorKind::kSystem, m) {}
};
// A wait ran past its deadline.
class Timeout : public Error {
 public:
  explicit Timeout(const std::string& m) : Error(ErrorKind::kTimeout, m) {}
};
// A peer died, closed, aborted or sent something malformed.
class RemoteError : public Error {
 public:
  explicit RemoteError(const std::string& m) : Error(ErrorKind::kRemote, m) {}
};

}  // namespace xccl

#define XCCL_STRINGIFY_(x) #x
#define XCCL_STRINGIFY(x) XCCL_STRINGIFY_(x)

// Throws InvalidUsage naming the failed condition, file and line, plus the message parts.
#define XCCL_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      throw ::xccl::InvalidUsage(::xccl::strCat(__VA_ARGS__, " [check '" #cond "' failed at ", \
                                                __FILE__, ":", __LINE__, "]"));                \
    }                                                                                          \
  } while (0)

// Like XCCL_CHECK, but for arguments from the caller (maps to xcclInvalidArgument).
#define XCCL_CHECK_ARG(cond, ...)                                 \
  do {                                                            \
    if (!(cond)) {                                                \
      throw ::xccl::InvalidArgument(::xccl::strCat(__VA_ARGS__)); \
    }                                                             \
  } while (0)

// Throws IoError with errno text for a failed system call.
#define XCCL_SYSCHECK(expr, what)                                                               \
  do {                                                                                          \
    if ((expr) < 0) {                                                                           \
      throw ::xccl::IoError(::xccl::strCat(what, " failed: ", ::xccl::errnoString(errno), " [", \
                                           __FILE__, ":", __LINE__, "]"));                      \
    }                                                                                           \
  } while (0)

namespace xccl {
std::string errnoString(int err);
}
