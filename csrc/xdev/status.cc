// Error names and strings, and the per-thread last error behind xdevGetLastError.
#include "status.h"

#include "report.h"

namespace xdev {

namespace {

thread_local xdevError_t tlsLastError = xdevSuccess;
thread_local std::string tlsLastMessage;

}  // namespace

xdevError_t recordError(xdevError_t code, const char* fn, const std::string& msg) {
  if (code == xdevSuccess || code == xdevErrorNotReady) return code;
  tlsLastError = code;
  tlsLastMessage = strCat(fn, ": ", msg);
  if (reportInfoEnabled()) reportInfo(strCat(xdevGetErrorName(code), " in ", tlsLastMessage));
  return code;
}

}  // namespace xdev

extern "C" {

const char* xdevGetErrorName(xdevError_t error) {
  switch (xdev::rawValue(error)) {
    case xdevSuccess:
      return "xdevSuccess";
    case xdevErrorInvalidValue:
      return "xdevErrorInvalidValue";
    case xdevErrorMemoryAllocation:
      return "xdevErrorMemoryAllocation";
    case xdevErrorInvalidDevice:
      return "xdevErrorInvalidDevice";
    case xdevErrorInvalidResourceHandle:
      return "xdevErrorInvalidResourceHandle";
    case xdevErrorNotReady:
      return "xdevErrorNotReady";
    case xdevErrorInvalidDevicePointer:
      return "xdevErrorInvalidDevicePointer";
    case xdevErrorLaunchFailure:
      return "xdevErrorLaunchFailure";
    case xdevErrorInternal:
      return "xdevErrorInternal";
    case xdevErrorStreamFailed:
      return "xdevErrorStreamFailed";
  }
  return "xdevErrorUnknown";
}

const char* xdevGetErrorString(xdevError_t error) {
  switch (xdev::rawValue(error)) {
    case xdevSuccess:
      return "no error";
    case xdevErrorInvalidValue:
      return "invalid argument";
    case xdevErrorMemoryAllocation:
      return "out of memory";
    case xdevErrorInvalidDevice:
      return "invalid device ordinal";
    case xdevErrorInvalidResourceHandle:
      return "invalid resource handle";
    case xdevErrorNotReady:
      return "device not ready";
    case xdevErrorInvalidDevicePointer:
      return "invalid device pointer";
    case xdevErrorLaunchFailure:
      return "unspecified launch failure";
    case xdevErrorInternal:
      return "internal error";
    case xdevErrorStreamFailed:
      return "an operation the stream waited for failed";
  }
  return "unrecognized error code";
}

xdevError_t xdevGetLastError(void) {
  xdevError_t e = xdev::tlsLastError;
  xdev::tlsLastError = xdevSuccess;
  return e;
}

xdevError_t xdevPeekAtLastError(void) { return xdev::tlsLastError; }

const char* xdevGetLastErrorMessage(void) { return xdev::tlsLastMessage.c_str(); }

}  // extern "C"
