// DeviceGuardImplInterface for xdev: what DeviceGuard, StreamGuard, torch.Stream, torch.Event
// and torch.accelerator call. Registered for PrivateUse1 at library load.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "XdevException.h"
#include "XdevFunctions.h"
#include "XdevStream.h"

namespace xdev_torch {
namespace {

struct XdevGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  XdevGuardImpl() = default;
  explicit XdevGuardImpl(c10::DeviceType t) {
    TORCH_CHECK(t == kXdev, "XdevGuardImpl: expected PrivateUse1, got ", t);
  }

  c10::DeviceType type() const override { return kXdev; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kXdev, "xdev guard: expected an xdev device, got ", d);
    return c10::Device(kXdev, xdev_torch::exchangeDevice(d.index()));
  }
  c10::Device getDevice() const override { return c10::Device(kXdev, currentDevice()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kXdev, "xdev guard: expected an xdev device, got ", d);
    xdev_torch::setDevice(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    XDEV_WARN(xdevSetDevice(d.index()));
  }

  c10::Stream getStream(c10::Device d) const override { return currentStream(d.index()); }
  c10::Stream getDefaultStream(c10::Device d) const override { return defaultStream(d.index()); }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    (void)priority;  // accepted, as the runtime accepts it; scheduling is per stream anyway
    return streamFromPool(d.index());
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false) const override {
    (void)isHighPriority;
    return streamFromPool(d.index());
  }
  c10::Stream exchangeStream(c10::Stream s) const override { return xdev_torch::exchangeStream(s); }

  c10::DeviceIndex deviceCount() const noexcept override { return xdev_torch::deviceCount(); }

  // torch.accelerator.get_device_capability: the dtypes an xdev tensor can hold and convert
  // between. xdev memory holds whatever a CPU tensor holds, except the quantized dtypes: the
  // QuantizedPrivateUse1 key has no kernels, so torch.empty(..., dtype=torch.qint8,
  // device="xdev") fails (tests/python/test_xdev_device.py checks this list both ways).
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    checkDeviceIndex(d.index() < 0 ? currentDevice() : d.index());
    c10::DeviceCapability cap;  // every dtype
    auto& types = cap.capability_data.supported_scalar_types;
    types.has_QInt8 = 0;
    types.has_QUInt8 = 0;
    types.has_QInt32 = 0;
    types.has_QUInt4x2 = 0;
    types.has_QUInt2x4 = 0;
    return cap;
  }

  // ---- events: void* is an xdevEvent_t, created lazily at the first record ----
  void destroyEvent(void* event, const c10::DeviceIndex device) const noexcept override {
    if (event != nullptr) {
      XDEV_WARN(xdevEventDestroy(static_cast<xdevEvent_t>(event)));
    }
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device == -1 || device == stream.device_index(),
                "xdev: event of xdev:", static_cast<int>(device),
                " cannot be recorded on a stream of ", stream.device(),
                " (an event belongs to one device)");
    xdevStream_t native = nativeStream(stream);
    DeviceSwitch guard(stream.device_index());
    auto ev = static_cast<xdevEvent_t>(*event);
    if (ev == nullptr) {
      const unsigned flags =
          flag == c10::EventFlag::BACKEND_DEFAULT ? xdevEventDefault : xdevEventDisableTiming;
      XDEV_CHECK(xdevEventCreateWithFlags(&ev, flags));
      *event = ev;
    }
    XDEV_CHECK(xdevEventRecord(ev, native));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) {
      return;  // never recorded: nothing to wait for
    }
    xdevStream_t native = nativeStream(stream);
    DeviceSwitch guard(stream.device_index());
    XDEV_CHECK(xdevStreamWaitEvent(native, static_cast<xdevEvent_t>(event), 0));
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) {
      return true;
    }
    const xdevError_t err = xdevEventQuery(static_cast<xdevEvent_t>(event));
    if (err == xdevErrorNotReady) {
      return false;
    }
    XDEV_CHECK(err);
    return true;
  }

  bool queryStream(const c10::Stream& stream) const override {
    xdevStream_t native = nativeStream(stream);
    DeviceSwitch guard(stream.device_index());
    const xdevError_t err = xdevStreamQuery(native);
    if (err == xdevErrorNotReady) {
      return false;
    }
    XDEV_CHECK(err);
    return true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    xdev_torch::synchronizeStream(stream);
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      XDEV_CHECK(xdevEventSynchronize(static_cast<xdevEvent_t>(event)));
    }
  }

  void synchronizeDevice(const c10::DeviceIndex device) const override {
    DeviceSwitch guard(resolveDevice(device));
    XDEV_CHECK(xdevDeviceSynchronize());
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex device) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "xdev: both events must be recorded before elapsed_time");
    float ms = 0;
    XDEV_CHECK(
        xdevEventElapsedTime(&ms, static_cast<xdevEvent_t>(start), static_cast<xdevEvent_t>(end)));
    return static_cast<double>(ms);
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override;
};

}  // namespace
}  // namespace xdev_torch

#include "XdevAllocator.h"

namespace xdev_torch {
namespace {
void XdevGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                                          const c10::Stream& stream) const {
  deviceAllocator()->recordStream(data_ptr, stream);
}
}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, XdevGuardImpl);

}  // namespace xdev_torch
