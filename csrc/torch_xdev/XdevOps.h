// What the explicit kernels and the boxed fallback share: viewing xdev memory as a CPU tensor
// (no copy) and turning CPU results back into xdev tensors.
#pragma once

#include <unordered_map>

#include <ATen/Tensor.h>
#include <c10/core/Storage.h>

namespace xdev_torch {

// Within one operator call, every xdev storage gets exactly one CPU alias storage, so two
// arguments over the same memory stay "the same storage" for the CPU kernel (overlap checks,
// is_alias_of) and a view the kernel returns can be mapped back to the xdev storage.
class AliasSet {
 public:
  // A CPU tensor with the same sizes, strides, offset and memory as the xdev tensor `t`.
  at::Tensor alias(const at::Tensor& t);
  // The xdev storage behind a CPU alias storage, or nullptr when `cpu` is not one of ours.
  const c10::Storage* original(const c10::StorageImpl* cpu) const;
  // After the kernel: a CPU alias storage the kernel resized (through the xdev allocator)
  // hands its new memory to the xdev storage.
  void adoptResizedStorages();

 private:
  struct Entry {
    c10::Storage xdev;
    c10::Storage cpu;
  };
  std::unordered_map<const c10::StorageImpl*, Entry> byXdev_;
  std::unordered_map<const c10::StorageImpl*, const Entry*> byCpu_;
};

// A CPU result turned into an xdev tensor on `device`: its whole storage is copied into new
// xdev memory and the sizes, strides and offset are kept (channels_last stays channels_last).
at::Tensor copyToNewXdevTensor(const at::Tensor& cpu, c10::DeviceIndex device);
// An xdev tensor over `storage` with the metadata of `like`.
at::Tensor xdevTensorOver(const c10::Storage& storage, const at::Tensor& like);

void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes);
void synchronizeCurrentStream(c10::DeviceIndex device);

}  // namespace xdev_torch
