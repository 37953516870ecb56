#include "XdevGenerator.h"

#include <memory>
#include <mutex>
#include <vector>

#include "XdevFunctions.h"

namespace xdev_torch {

XdevGeneratorImpl::XdevGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kXdev, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

void XdevGeneratorImpl::set_current_seed(uint64_t seed) { cpu_.set_current_seed(seed); }
void XdevGeneratorImpl::set_offset(uint64_t offset) { cpu_.set_offset(offset); }
uint64_t XdevGeneratorImpl::get_offset() const { return cpu_.get_offset(); }
uint64_t XdevGeneratorImpl::current_seed() const { return cpu_.current_seed(); }
uint64_t XdevGeneratorImpl::seed() { return cpu_.seed(); }
void XdevGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
}
c10::intrusive_ptr<c10::TensorImpl> XdevGeneratorImpl::get_state() const {
  return cpu_.unsafeGetGeneratorImpl()->get_state();
}

XdevGeneratorImpl* XdevGeneratorImpl::clone_impl() const {
  auto* copy = new XdevGeneratorImpl(device().index());
  copy->cpu_ = cpu_.clone();
  return copy;
}

const at::Generator& defaultGenerator(c10::DeviceIndex device) {
  static std::vector<at::Generator> generators;
  static std::once_flag once;
  std::call_once(once, [] {
    for (c10::DeviceIndex d = 0; d < deviceCount(); ++d) {
      generators.push_back(at::make_generator<XdevGeneratorImpl>(d));
    }
  });
  device = resolveDevice(device);
  return generators[device];
}

at::Generator newGenerator(c10::DeviceIndex device) {
  return at::make_generator<XdevGeneratorImpl>(resolveDevice(device));
}

at::Generator toCpuGenerator(const at::Generator& gen) {
  if (gen.defined() && gen.device().type() == kXdev) {
    return static_cast<XdevGeneratorImpl*>(gen.unsafeGetGeneratorImpl())->cpuGenerator();
  }
  return gen;
}

}  // namespace xdev_torch
