// DeviceStreams.cpp — see DeviceStreams.hpp.
#include "DeviceStreams.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace torch_xccl {
namespace {

// c10's guard of the device's type (registered by the xdev extension, or by torch's CUDA
// library when torch has CUDA).
const c10::impl::VirtualGuardImpl& guard(c10::DeviceType type) {
  if (type == c10::DeviceType::CUDA) {
    static const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    return cuda;
  }
  static const c10::impl::VirtualGuardImpl xdev(c10::DeviceType::PrivateUse1);
  return xdev;
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

bool isAccelerator(const c10::Device& d) { return isXdev(d) || d.is_cuda(); }

bool onAccelerator(const at::Tensor& t) { return t.defined() && isAccelerator(t.device()); }

void* nativeStream(const c10::Stream& s) {
  if (s.device().is_cuda()) return s.native_handle();
  TORCH_CHECK(isXdev(s.device()), "xccl: expected an xdev or CUDA stream, got one on ", s.device());
  return reinterpret_cast<void*>(static_cast<uintptr_t>(s.id()));
}

c10::Stream currentStream(const c10::Device& d) { return guard(d.type()).getStream(d); }

c10::Stream poolStream(const c10::Device& d) {
  return guard(d.type()).getStreamFromGlobalPool(d, false);
}

void recordStream(const at::Tensor& t, const c10::Stream& s) {
  if (!onAccelerator(t) || !t.has_storage()) return;
  guard(t.device().type()).recordDataPtrOnStream(t.storage().data_ptr(), s);
}

DeviceEvent::DeviceEvent(const c10::Device& d, bool timing) {
  if (d.is_cuda()) {
    // bound to a device at its first record
    c10_.emplace(c10::DeviceType::CUDA,
                 timing ? c10::EventFlag::BACKEND_DEFAULT : c10::EventFlag::PYTORCH_DEFAULT);
    return;
  }
  OnDevice on(d.index());  // an xdev event belongs to the device current at its creation
  check(xdevEventCreateWithFlags(&ev_, timing ? xdevEventDefault : xdevEventDisableTiming),
        "xdevEventCreate");
}

float DeviceEvent::elapsedMs(const DeviceEvent& end) const {
  if (c10_) return static_cast<float>(c10_->elapsedTime(*end.c10_));
  float ms = 0;
  check(xdevEventElapsedTime(&ms, ev_, end.ev_), "xdevEventElapsedTime");
  return ms;
}

DeviceEvent::~DeviceEvent() {
  if (ev_ != nullptr) xdevEventDestroy(ev_);
}

void DeviceEvent::record(const c10::Stream& s) {
  if (c10_) return c10_->record(s);
  OnDevice on(s);
  check(xdevEventRecord(ev_, static_cast<xdevStream_t>(nativeStream(s))), "xdevEventRecord");
}

void DeviceEvent::block(const c10::Stream& s) {
  if (c10_) return c10_->block(s);
  OnDevice on(s);
  check(xdevStreamWaitEvent(static_cast<xdevStream_t>(nativeStream(s)), ev_, 0),
        "xdevStreamWaitEvent");
}

bool DeviceEvent::query() {
  if (c10_) return c10_->query();
  xdevError_t e = xdevEventQuery(ev_);
  if (e == xdevErrorNotReady) return false;
  check(e, "xdevEventQuery");
  return true;
}

void DeviceEvent::synchronize() {
  if (c10_) return c10_->synchronize();
  check(xdevEventSynchronize(ev_), "xdevEventSynchronize");
}

}  // namespace torch_xccl
