#include "xdev_device.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
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

// 1: operations staged through host memory, as on CUDA (xdev_device.h); every rank agrees.
XCCL_PARAM(XdevStaging, "XDEV_STAGING", 0, 0, 1)

struct XdevDevice::Stage {
  char* host = nullptr;  // the host device's peerable memory the operation runs on
  size_t bytes = 0;
  uint32_t ready = 0;  // 1 once the stream has copied the inputs in (__atomic loads, stores)
  xdevEvent_t done = nullptr;  // recorded after the copies back: complete = reusable
  bool busy = false;           // between stageBegin and the hold that records `done`
  ~Stage() {                   // `host`, a memfd of the host device's, goes with the process
    if (done) xdevEventDestroy(done);
  }
};

namespace {

// The stage this thread is enqueuing an operation on, and the copies back for its hold.
thread_local XdevDevice::Stage* tlsStage = nullptr;
thread_local std::vector<Device::StageCopy> tlsStageOut;

// A streamCapture token: the event before the operation, or a staged operation's ready word.
struct Token {
  xdevEvent_t event = nullptr;
  const uint32_t* ready = nullptr;
};

void copiesOn(xcclStream_t stream, const std::vector<Device::StageCopy>& copies) {
  for (const Device::StageCopy& c : copies) {
    check(xdevMemcpyAsync(c.dst, c.src, c.bytes, xdevMemcpyDefault,
                          static_cast<xdevStream_t>(stream)),
          "xdevMemcpyAsync of a staged range");
  }
}

}  // namespace

XdevDevice::XdevDevice(int ordinal) : HostDevice(ordinal) {
  int count = 0;
  check(xdevGetDeviceCount(&count), "xdevGetDeviceCount");
  XCCL_CHECK(ordinal >= 0 && ordinal < count, "xdev:", ordinal, " does not exist (", count,
             " xdev devices; XCCL_XDEV_COUNT sets how many)");
  staged_ = xcclParamXdevStaging() != 0;
}

XdevDevice::~XdevDevice() = default;

char* XdevDevice::stageBegin(xcclStream_t stream, size_t bytes, Device& engine) {
  checkStreamDevice(stream, ordinal());
  DeviceScope scope(ordinal());
  Stage* pick = nullptr;
  {
    std::lock_guard<std::mutex> g(stageMu_);
    for (auto& s : stages_) {
      if (s->busy || s->bytes < bytes || xdevEventQuery(s->done) != xdevSuccess) continue;
      if (pick == nullptr || s->bytes < pick->bytes) pick = s.get();
    }
    if (pick == nullptr) {
      auto s = std::make_unique<Stage>();
      check(xdevEventCreateWithFlags(&s->done, xdevEventDisableTiming), "xdevEventCreate");
      if (bytes > 0) {                // peerable host memory: peers of this host read it in place
        s->bytes = size_t{64} << 10;  // powers of two from 64 KiB: few stages, few memfds
        while (s->bytes < bytes) s->bytes <<= 1;
        s->host = static_cast<char*>(engine.allocPeerable(s->bytes));
      }
      pick = s.get();
      stages_.push_back(std::move(s));
    }
    pick->busy = true;
  }
  xdevGetLastError();  // a query that said "not ready" leaves nothing behind
  __atomic_store_n(&pick->ready, 0u, __ATOMIC_RELEASE);
  tlsStage = pick;
  tlsStageOut.clear();
  return pick->host;
}

void XdevDevice::stageIn(xcclStream_t stream, const std::vector<StageCopy>& copies) {
  DeviceScope scope(ordinal());
  copiesOn(stream, copies);
}

void XdevDevice::stageOut(std::vector<StageCopy>&& copies) { tlsStageOut = std::move(copies); }

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
  auto token = std::make_unique<Token>();
  if (Stage* s = tlsStage) {  // staged: the stream marks the inputs copied in
    token->ready = &s->ready;
    check(xdevLaunchHostFunc(
              static_cast<xdevStream_t>(stream),
              [](void* w) { __atomic_store_n(static_cast<uint32_t*>(w), 1u, __ATOMIC_RELEASE); },
              &s->ready),
          "xdevLaunchHostFunc of a stage's ready mark");
    return token.release();
  }
  check(xdevEventCreateWithFlags(&token->event, xdevEventDisableTiming),
        "xdevEventCreateWithFlags");
  xdevError_t e = xdevEventRecord(token->event, static_cast<xdevStream_t>(stream));
  if (e != xdevSuccess) {
    xdevEventDestroy(token->event);
    check(e, "xdevEventRecord");
  }
  return token.release();
}

void XdevDevice::streamWait(void* token, const std::atomic<bool>& abort) {
  auto* t = static_cast<Token*>(token);
  if (t == nullptr) return;
  if (t->ready != nullptr) {
    waitStaged(t->ready, abort);
    return;
  }
  check(xdevEventSynchronize(t->event), "xdevEventSynchronize");
}

void XdevDevice::streamRelease(void* token) {
  auto* t = static_cast<Token*>(token);
  if (t == nullptr) return;
  if (t->event != nullptr) xdevEventDestroy(t->event);
  delete t;
}

void* XdevDevice::streamHold(xcclStream_t stream, const char* label) {
  DeviceScope scope(ordinal());  // NULL: this device's default stream
  xdevHold_t hold = nullptr;
  check(xdevStreamHoldNamed(static_cast<xdevStream_t>(stream), &hold, label), "xdevStreamHold");
  if (Stage* s = tlsStage) {  // the outputs back, behind the hold
    tlsStage = nullptr;
    std::vector<StageCopy> out = std::move(tlsStageOut);
    tlsStageOut.clear();
    copiesOn(stream, out);
    check(xdevEventRecord(s->done, static_cast<xdevStream_t>(stream)), "xdevEventRecord");
    std::lock_guard<std::mutex> g(stageMu_);
    s->busy = false;
  }
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

void* XdevDevice::allocPeerable(size_t bytes) {
  DeviceScope scope(ordinal());
  void* p = nullptr;
  check(xdevMalloc(&p, bytes), "xdevMalloc");
  return p;
}

void XdevDevice::freePeerable(void* ptr) {
  DeviceScope scope(ordinal());
  check(xdevFree(ptr), "xdevFree");
}

}  // namespace xccl
