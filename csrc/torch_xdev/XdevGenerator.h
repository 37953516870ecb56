// Random numbers on xdev: one default generator per device, each wrapping a CPU (Philox-free,
// mt19937) generator. The fallback hands the wrapped CPU generator to the CPU kernels, so
// torch.xdev.manual_seed(s) followed by an op gives the same numbers as torch.manual_seed(s)
// followed by the same op on the CPU.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace xdev_torch {

struct XdevGeneratorImpl : public c10::GeneratorImpl {
  explicit XdevGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator the CPU kernels draw from (shares this generator's state).
  at::Generator cpuGenerator() const { return cpu_; }

 private:
  XdevGeneratorImpl* clone_impl() const override;
  at::Generator cpu_;
};

const at::Generator& defaultGenerator(c10::DeviceIndex device);
at::Generator newGenerator(c10::DeviceIndex device);
// An xdev generator -> its CPU generator; anything else unchanged.
at::Generator toCpuGenerator(const at::Generator& gen);

}  // namespace xdev_torch
