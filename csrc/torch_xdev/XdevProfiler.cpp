// XdevProfiler.cpp — device time of xdev work in torch's profiler: the profiler stubs torch
// calls for PrivateUse1 (torch::profiler::impl::registerPrivateUse1Methods), what CUDA's
// stubs are to CUDA. With
//
//   torch.autograd.profiler.profile(use_device="xdev", use_kineto=False)
//
// torch records one of these events on the current xdev stream when an op starts and one
// when it ends, and reports the time between them as the op's device time
// (privateuse1_elapsed_us, "self xdev time" in key_averages()): for a collective on xdev
// tensors, the time its stream waited for the collective to finish, which the host-side
// time of the call does not show (it returns once the work is queued).
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

#include "XdevException.h"
#include "XdevFunctions.h"
#include "XdevStream.h"
#include "xdev_runtime.h"

namespace xdev_torch {
namespace {

namespace prof = torch::profiler::impl;

struct XdevProfilerStubs final : public prof::ProfilerStubs {
  void record(c10::DeviceIndex* device, prof::ProfilerVoidEventStub* event,
              int64_t* cpuNs) const override {
    const c10::DeviceIndex d = currentDevice();
    if (device != nullptr) *device = d;
    xdevEvent_t ev = nullptr;
    XDEV_CHECK(xdevEventCreateWithFlags(&ev, xdevEventDefault));  // a timing event
    *event = std::shared_ptr<void>(
        ev, [](void* e) { XDEV_WARN(xdevEventDestroy(static_cast<xdevEvent_t>(e))); });
    if (cpuNs != nullptr) *cpuNs = c10::getTime();
    XDEV_CHECK(xdevEventRecord(ev, currentNativeStream(d)));
  }

  // Microseconds between two records, as CUDA's stubs answer (the profiler's unit).
  float elapsed(const prof::ProfilerVoidEventStub* start,
                const prof::ProfilerVoidEventStub* end) const override {
    auto* a = static_cast<xdevEvent_t>(start->get());
    auto* b = static_cast<xdevEvent_t>(end->get());
    XDEV_CHECK(xdevEventSynchronize(a));
    XDEV_CHECK(xdevEventSynchronize(b));
    float ms = 0;
    XDEV_CHECK(xdevEventElapsedTime(&ms, a, b));
    return ms * 1000.0f;
  }

  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const c10::DeviceIndex saved = currentDevice();
    for (c10::DeviceIndex d = 0; d < deviceCount(); ++d) {
      setDevice(d);
      op(d);
    }
    setDevice(saved);
  }

  void synchronize() const override { XDEV_CHECK(xdevDeviceSynchronize()); }
};

[[maybe_unused]] const bool kProfilerStubsRegistered = [] {
  static XdevProfilerStubs stubs;
  prof::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace
}  // namespace xdev_torch
