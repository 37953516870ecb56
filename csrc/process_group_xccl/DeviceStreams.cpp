// DeviceStreams.cpp — see DeviceStreams.hpp.
#include "DeviceStreams.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace torch_xccl {
namespace {

const c10::impl::VirtualGuardImpl& guard() {
  static const c10::impl::VirtualGuardImpl impl(c10::DeviceType::PrivateUse1);
  return impl;
}

void check(xdevError_t e, const char* what) {
  TORCH_CHECK(e == xdevSuccess, "xccl: ", what, " failed: ", xdevGetErrorString(e), " (",
              xdevGetLastErrorMessage(), ")");
}

// A NULL (default) stream means the *current* device's default stream to the runtime: make
// the stream's device current around calls that take one.
class OnDevice {
 public:
  explicit OnDevice(const c10::Stream& s) : OnDevice(s.device_index()) {}
  explicit OnDevice(int device) {
    xdevGetDevice(&saved_);
    if (saved_ != device) {
      check(xdevSetDevice(device), "xdevSetDevice");
      switched_ = true;
    }
  }
  ~OnDevice() {
    if (switched_) xdevSetDevice(saved_);
  }

 private:
  int saved_ = 0;
  bool switched_ = false;
};

}  // namespace

bool isXdev(const c10::Device& d) { return d.type() == c10::DeviceType::PrivateUse1; }

bool onXdev(const at::Tensor& t) { return t.defined() && isXdev(t.device()); }

xdevStream_t nativeStream(const c10::Stream& s) {
  TORCH_CHECK(isXdev(s.device()), "xccl: expected an xdev stream, got one on ", s.device());
  return reinterpret_cast<xdevStream_t>(static_cast<uintptr_t>(s.id()));
}

c10::Stream currentStream(const c10::Device& d) { return guard().getStream(d); }

c10::Stream poolStream(const c10::Device& d) { return guard().getStreamFromGlobalPool(d, false); }

void recordStream(const at::Tensor& t, const c10::Stream& s) {
  if (!onXdev(t) || !t.has_storage()) return;
  guard().recordDataPtrOnStream(t.storage().data_ptr(), s);
}

DeviceEvent::DeviceEvent(const c10::Device& d) {
  OnDevice on(d.index());  // an event belongs to the device current at its creation
  check(xdevEventCreateWithFlags(&ev_, xdevEventDisableTiming), "xdevEventCreate");
}

DeviceEvent::~DeviceEvent() {
  if (ev_ != nullptr) xdevEventDestroy(ev_);
}

void DeviceEvent::record(const c10::Stream& s) {
  OnDevice on(s);
  check(xdevEventRecord(ev_, nativeStream(s)), "xdevEventRecord");
}

void DeviceEvent::block(const c10::Stream& s) {
  OnDevice on(s);
  check(xdevStreamWaitEvent(nativeStream(s), ev_, 0), "xdevStreamWaitEvent");
}

bool DeviceEvent::query() {
  xdevError_t e = xdevEventQuery(ev_);
  if (e == xdevErrorNotReady) return false;
  check(e, "xdevEventQuery");
  return true;
}

void DeviceEvent::synchronize() { check(xdevEventSynchronize(ev_), "xdevEventSynchronize"); }

}  // namespace torch_xccl
