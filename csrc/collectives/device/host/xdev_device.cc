#include "xdev_device.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "xdev_runtime.h"

namespace xccl {

namespace {

// Throws InvalidUsage naming the runtime call and its message.
void check(xdevError_t e, const char* what) {
  if (e == xdevSuccess) return;
  throw InvalidUsage(
      strCat(what, ": ", xdevGetErrorString(e), " (", xdevGetLastErrorMessage(), ")"));
}

// Runs the body with `ordinal` as the calling thread's current xdev device (a NULL stream
// and new events then belong to it), restoring the caller's device afterwards.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal) {
    check(xdevGetDevice(&saved_), "xdevGetDevice");
    if (saved_ != ordinal) check(xdevSetDevice(ordinal), "xdevSetDevice");
    changed_ = saved_ != ordinal;
  }
  ~DeviceScope() {
    if (changed_) xdevSetDevice(saved_);
  }

 private:
  int saved_ = 0;
  bool changed_ = false;
};

void checkStreamDevice(xcclStream_t stream, int ordinal) {
  if (stream == nullptr) return;  // the communicator's device's default stream
  int dev = -1;
  check(xdevStreamGetDevice(static_cast<xdevStream_t>(stream), &dev), "xdevStreamGetDevice");
  if (dev != ordinal) {
    throw Error(ErrorKind::kInvalidArgument,
                strCat("the stream belongs to xdev:", dev,
                       " but the communicator's device is xdev:", ordinal));
  }
}

}  // namespace

XdevDevice::XdevDevice(int ordinal) : HostDevice(ordinal) {
  int count = 0;
  check(xdevGetDeviceCount(&count), "xdevGetDeviceCount");
  XCCL_CHECK(ordinal >= 0 && ordinal < count, "xdev:", ordinal, " does not exist (", count,
             " xdev devices; XCCL_XDEV_COUNT sets how many)");
}

int XdevDevice::currentOrdinal() {
  int dev = 0;
  check(xdevGetDevice(&dev), "xdevGetDevice");
  return dev;
}

XCCL_PARAM(XdevIsland, "XDEV_ISLAND", 4, 1, 1024)
XCCL_PARAM(XdevXlGbs, "XDEV_XL_GBS", 100, 0, 1 << 20)

DeviceWiring XdevDevice::wiring() {
  DeviceWiring w;
  int count = 0;
  if (xdevGetDeviceCount(&count) != xdevSuccess) return w;
  w.resize(count);
  const int64_t island = std::max<int64_t>(1, xcclParamXdevIsland());
  for (int a = 0; a < count; ++a) {
    for (int b = 0; b < count; ++b) {
      if (a == b) continue;
      const bool same = a / island == b / island;
      w.kind[a][b] = same ? "XL" : "PHB";
      w.gbs[a][b] = same ? static_cast<double>(xcclParamXdevXlGbs()) : 0;
    }
  }
  return w;
}

std::string XdevDevice::busId() const { return strCat("xdev:", ordinal()); }

void* XdevDevice::streamCapture(xcclStream_t stream) {
  checkStreamDevice(stream, ordinal());
  DeviceScope scope(ordinal());
  xdevEvent_t ev = nullptr;
  check(xdevEventCreateWithFlags(&ev, xdevEventDisableTiming), "xdevEventCreateWithFlags");
  xdevError_t e = xdevEventRecord(ev, static_cast<xdevStream_t>(stream));
  if (e != xdevSuccess) {
    xdevEventDestroy(ev);
    check(e, "xdevEventRecord");
  }
  return ev;
}

void XdevDevice::streamWait(void* token) {
  if (token != nullptr)
    check(xdevEventSynchronize(static_cast<xdevEvent_t>(token)), "xdevEventSynchronize");
}

void XdevDevice::streamRelease(void* token) {
  if (token != nullptr) xdevEventDestroy(static_cast<xdevEvent_t>(token));
}

void* XdevDevice::streamHold(xcclStream_t stream) {
  DeviceScope scope(ordinal());  // NULL: this device's default stream
  xdevHold_t hold = nullptr;
  check(xdevStreamHold(static_cast<xdevStream_t>(stream), &hold), "xdevStreamHold");
  return hold;
}

void XdevDevice::streamResume(void* token) {
  if (token == nullptr) return;
  // On the progress thread: never throws (a stream left held would hang its users, but the
  // runtime only fails a release for a NULL hold).
  xdevError_t e = xdevHoldRelease(static_cast<xdevHold_t>(token));
  if (e != xdevSuccess) {
    XCCL_WARN(INIT, "xdevHoldRelease: ", xdevGetErrorString(e), " (", xdevGetLastErrorMessage(),
              ")");
  }
}

void XdevDevice::streamFail(void* token, const std::string& why) {
  if (token == nullptr) return;
  xdevError_t e = xdevHoldFail(static_cast<xdevHold_t>(token), why.c_str());
  if (e != xdevSuccess) {
    XCCL_WARN(INIT, "xdevHoldFail: ", xdevGetErrorString(e), " (", xdevGetLastErrorMessage(), ")");
  }
}

bool XdevDevice::exportBuffer(const void* ptr, size_t bytes, PeerRef* ref) {
  static_assert(sizeof(PeerRef) == sizeof(xdevIpcMemHandle_t), "a PeerRef is an IPC handle");
  xdevIpcMemHandle_t h;
  if (xdevIpcGetMemHandle(&h, const_cast<void*>(ptr)) != xdevSuccess) {
    xdevGetLastError();  // not device memory (a host buffer): not an error here
    return false;
  }
  size_t left = 0;
  if (xdevIpcMemHandleGetSize(&h, &left) != xdevSuccess || left < bytes) return false;
  std::memcpy(ref->bytes, h.reserved, sizeof(h.reserved));
  return true;
}

const void* XdevDevice::importBuffer(const PeerRef& ref, int ownerPid, size_t bytes) {
  xdevIpcMemHandle_t h;
  std::memcpy(h.reserved, ref.bytes, sizeof(h.reserved));
  // The handle names its owner: a peer may only make us map its own memory.
  int64_t pid = 0;
  std::memcpy(&pid, h.reserved + 8, sizeof(pid));
  size_t left = 0;
  if (pid != ownerPid || xdevIpcMemHandleGetSize(&h, &left) != xdevSuccess || left < bytes) {
    xdevGetLastError();
    throw RemoteError(strCat("a peer-read frame from process ", ownerPid,
                             " names memory it does not own, or fewer than ", bytes, " bytes"));
  }
  void* p = nullptr;
  if (xdevIpcOpenMemHandle(&p, h, 0) != xdevSuccess) {
    const std::string why = xdevGetLastErrorMessage();
    xdevGetLastError();
    throw RemoteError(strCat("cannot map process ", ownerPid, "'s buffer: ", why));
  }
  return p;
}

}  // namespace xccl
