// The API edge's one conversion: an exception's ErrorKind (common/error.h, which knows no
// xccl.h) to the xcclResult_t a caller sees. Same numbers, checked here.
#pragma once

#include "common/error.h"
#include "xccl.h"

namespace xccl {

static_assert(static_cast<int>(ErrorKind::kUnhandled) == xcclUnhandledError &&
                  static_cast<int>(ErrorKind::kSystem) == xcclSystemError &&
                  static_cast<int>(ErrorKind::kInternal) == xcclInternalError &&
                  static_cast<int>(ErrorKind::kInvalidArgument) == xcclInvalidArgument &&
                  static_cast<int>(ErrorKind::kInvalidUsage) == xcclInvalidUsage &&
                  static_cast<int>(ErrorKind::kRemote) == xcclRemoteError &&
                  static_cast<int>(ErrorKind::kTimeout) == xcclTimeout,
              "ErrorKind and xcclResult_t number their kinds alike");

inline xcclResult_t toResult(ErrorKind k) { return static_cast<xcclResult_t>(k); }

// A failed result rethrown as an exception (a sticky communicator error, an operation run on
// the caller). Anything that is not one of the kinds (xcclInProgress) is a bug: kInternal.
inline ErrorKind toKind(xcclResult_t r) {
  switch (r) {
    case xcclUnhandledError:
    case xcclSystemError:
    case xcclInternalError:
    case xcclInvalidArgument:
    case xcclInvalidUsage:
    case xcclRemoteError:
    case xcclTimeout:
      return static_cast<ErrorKind>(r);
    default:
      return ErrorKind::kInternal;
  }
}

}  // namespace xccl
