// torch_xccl._xdev_C: the Python face of the xdev device. Loading this library registers
// everything with torch (static initialisers in the other files: guard, hooks, allocators,
// kernels, fallback); these bindings are what torch_xccl/xdev.py needs beyond torch's own
// device-generic APIs.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "XdevException.h"
#include "XdevFunctions.h"
#include "XdevGenerator.h"
#include "XdevStream.h"

namespace xdev_torch {
void sleepOnCurrentStream(int64_t ms);  // XdevOps.cpp
}

namespace {

namespace py = pybind11;
using namespace xdev_torch;

py::object defaultGeneratorObject(c10::DeviceIndex device) {
  return py::reinterpret_steal<py::object>(
      THPGenerator_initDefaultGenerator(defaultGenerator(device)));
}

}  // namespace

PYBIND11_MODULE(_xdev_C, m) {
  m.doc() = "xdev (host-memory simulated accelerator) as the PrivateUse1 device of torch";
  m.def("_device_count", [] { return static_cast<int>(deviceCount()); });
  m.def("_current_device", [] { return static_cast<int>(currentDevice()); });
  m.def("_set_device", [](int d) { setDevice(static_cast<c10::DeviceIndex>(d)); });
  m.def("_exchange_device", [](int d) {
    if (d < 0) {
      return -1;
    }
    return static_cast<int>(exchangeDevice(static_cast<c10::DeviceIndex>(d)));
  });
  m.def("_check_device", [](int d) { checkDeviceIndex(static_cast<c10::DeviceIndex>(d)); });
  m.def("_default_generator",
        [](int d) { return defaultGeneratorObject(static_cast<c10::DeviceIndex>(d)); });
  m.def(
      "_sleep",
      [](int64_t ms) {
        py::gil_scoped_release nogil;
        sleepOnCurrentStream(ms);
      },
      "Queue a host function that sleeps `ms` milliseconds on the current stream (tests)");
  m.def("_stream_pool_size", [] { return kStreamPoolSize; });
  // torch.xdev.synchronize: straight to the runtime. torch.accelerator.synchronize() returns
  // without doing anything until torch has lazily initialised the device type, which only
  // its Python tensor factories do (a tensor made in C++, e.g. by symm_mem.empty, is not).
  m.def("_synchronize", [](int d) {
    py::gil_scoped_release nogil;
    auto synchronizeDevice = [](int device) {
      c10::DeviceIndex prev = exchangeDevice(static_cast<c10::DeviceIndex>(device));
      xdevError_t e = xdevDeviceSynchronize();
      exchangeDevice(prev);
      return e;
    };
    XDEV_CHECK(synchronizeDevice(d));
  });
  m.def(
      "_clear_errors",
      [](int d) {
        c10::DeviceIndex prev = exchangeDevice(static_cast<c10::DeviceIndex>(d));
        xdevError_t e = xdevDeviceClearErrors();
        exchangeDevice(prev);
        XDEV_CHECK(e);
      },
      "Forget the sticky errors of the device's streams (xdevDeviceClearErrors)");
  m.def(
      "_accelerator_claimed", [] { return acceleratorClaimed(); },
      "Whether this process uses xdev as torch's accelerator (XdevFunctions.h)");
  m.def(
      "_claim_accelerator", [] { claimAccelerator(); },
      "Make xdev this process's accelerator (torch.xdev.init())");
}
