// Error idiom of the xdev torch integration: every runtime call goes through XDEV_CHECK, which
// turns an xdevError_t into a C++ exception torch understands (OutOfMemoryError for
// xdevErrorMemoryAllocation, c10::Error otherwise) with the runtime's own message.
#pragma once

#include <c10/util/Exception.h>

#include <xdev_runtime.h>

namespace xdev_torch {

[[noreturn]] void raiseRuntimeError(xdevError_t err, const char* call, const char* file, int line);

}  // namespace xdev_torch

#define XDEV_CHECK(expr)                                                      \
  do {                                                                        \
    xdevError_t xdev_err__ = (expr);                                          \
    if (xdev_err__ != xdevSuccess) {                                          \
      ::xdev_torch::raiseRuntimeError(xdev_err__, #expr, __FILE__, __LINE__); \
    }                                                                         \
  } while (0)

// For noexcept contexts (destructors, deleters): report, never throw.
#define XDEV_WARN(expr)                                                         \
  do {                                                                          \
    xdevError_t xdev_err__ = (expr);                                            \
    if (xdev_err__ != xdevSuccess) {                                            \
      TORCH_WARN("xdev: ", #expr, " failed: ", xdevGetErrorString(xdev_err__)); \
      (void)xdevGetLastError();                                                 \
    }                                                                           \
  } while (0)
