// What the explicit kernels (XdevOps.cpp) and the boxed fallback (XdevFallback.cpp) share
// (XdevOps.h): CPU aliases of xdev memory, and CPU results copied back into xdev tensors.
#include <cstring>

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <c10/core/TensorImpl.h>

#include "XdevAllocator.h"
#include "XdevException.h"
#include "XdevFunctions.h"
#include "XdevOps.h"
#include "XdevStream.h"

namespace xdev_torch {

namespace {

// Allocates xdev memory for a CPU alias storage that a CPU kernel resizes; the DataPtr says
// "CPU" while it lives in the alias and is re-tagged when the xdev storage adopts it.
struct AliasResizeAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DataPtr ptr = deviceAllocator()->allocate(nbytes);
    // The block may have been freed by another thread with work still queued on this
    // stream after our earlier synchronisation; the CPU kernel writes it from the host.
    synchronizeCurrentStream(currentDevice());
    ptr.unsafe_set_device(c10::Device(c10::kCPU));
    return ptr;
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

AliasResizeAllocator gAliasResizeAllocator;

at::Tensor tensorOver(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                    like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                 like.storage_offset());
  t._set_conj(like.is_conj());
  t._set_neg(like.is_neg());
  return t;
}

}  // namespace

at::Tensor AliasSet::alias(const at::Tensor& t) {
  const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
  auto it = byXdev_.find(key);
  if (it == byXdev_.end()) {
    const c10::Storage& xs = t.storage();
    // Non-owning view of the xdev memory, tagged CPU; resizable through the xdev allocator.
    c10::DataPtr view(xs.mutable_data(), nullptr, nullptr, c10::Device(c10::kCPU));
    c10::Storage cpu(c10::Storage::use_byte_size_t(), xs.nbytes(), std::move(view),
                     &gAliasResizeAllocator, /*resizable=*/true);
    it = byXdev_.emplace(key, Entry{xs, std::move(cpu)}).first;
    byCpu_[it->second.cpu.unsafeGetStorageImpl()] = &it->second;
  }
  return tensorOver(it->second.cpu, c10::DispatchKey::CPU, t);
}

const c10::Storage* AliasSet::original(const c10::StorageImpl* cpu) const {
  auto it = byCpu_.find(cpu);
  return it == byCpu_.end() ? nullptr : &it->second->xdev;
}

void AliasSet::adoptResizedStorages() {
  for (auto& [key, entry] : byXdev_) {
    c10::StorageImpl* cpu = entry.cpu.unsafeGetStorageImpl();
    c10::StorageImpl* xdev = entry.xdev.unsafeGetStorageImpl();
    if (cpu->data() == xdev->data() && cpu->nbytes() == xdev->nbytes()) {
      continue;
    }
    // The kernel resized the alias: its new memory came from the xdev allocator.
    c10::DataPtr moved = cpu->set_data_ptr(
        c10::DataPtr(xdev->mutable_data(), nullptr, nullptr, c10::Device(c10::kCPU)));
    const size_t nbytes = cpu->nbytes();
    cpu->set_nbytes(xdev->nbytes());
    if (moved.get() != nullptr) {
      TORCH_INTERNAL_ASSERT(isXdevDataPtr(moved),
                            "xdev fallback: a CPU kernel replaced the "
                            "memory of an xdev storage with memory that is not xdev memory");
      moved.unsafe_set_device(xdev->device());
    } else {
      moved = c10::DataPtr(nullptr, xdev->device());
    }
    xdev->set_data_ptr_noswap(std::move(moved));
    xdev->set_nbytes(nbytes);
  }
}

at::Tensor xdevTensorOver(const c10::Storage& storage, const at::Tensor& like) {
  return tensorOver(storage, c10::DispatchKey::PrivateUse1, like);
}

at::Tensor copyToNewXdevTensor(const at::Tensor& cpu, c10::DeviceIndex device) {
  c10::DeviceGuard guard(c10::Device(kXdev, device));
  const size_t nbytes = cpu.storage().nbytes();
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, deviceAllocator()->allocate(nbytes),
                       deviceAllocator(),
                       /*resizable=*/true);
  if (nbytes > 0) {
    // Device memory is host memory. A block from this stream's cache may still have work
    // queued on the stream (freed with work pending, possibly by another thread since the
    // fallback's own synchronisation): wait for the stream before writing it from the host.
    synchronizeCurrentStream(device);
    std::memcpy(storage.mutable_data(), cpu.storage().data(), nbytes);
  }
  return xdevTensorOver(storage, cpu);
}

void synchronizeCurrentStream(c10::DeviceIndex device) { synchronizeStream(currentStream(device)); }

void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "xdev: trying to resize a storage that is not resizable");
  const c10::DeviceIndex device = storage->device().index();
  c10::DeviceGuard guard(c10::Device(kXdev, device));
  c10::DataPtr fresh = deviceAllocator()->allocate(nbytes);
  synchronizeCurrentStream(device);  // the old bytes are final and the new block is idle
  const size_t keep = std::min(nbytes, storage->nbytes());
  if (keep > 0) {
    std::memcpy(fresh.get(), storage->data(), keep);
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

}  // namespace xdev_torch
