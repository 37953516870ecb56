// Explicit xdev kernels (the helpers they share with the fallback: XdevAlias.cpp): tensor
// creation and metadata (empty, views, resize, set_), copies
// (through xdevMemcpyAsync on the current stream), fill/zero (queued on the current stream),
// scalars, record_stream and the convolution entry points torch leaves to the backend.
// Everything else goes through the boxed fallback (XdevFallback.cpp).
#include "XdevOps.h"

#include <cstring>
#include <thread>

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "XdevAllocator.h"
#include "XdevException.h"
#include "XdevFunctions.h"
#include "XdevHostAllocator.h"
#include "XdevStream.h"

namespace xdev_torch {

// ---------------------------------------------------------------- creation and metadata

namespace {

// The device of an empty/empty_strided call, after checking its layout and pinning.
c10::Device checkedXdevDevice(std::optional<c10::Device> device_opt,
                              std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  c10::Device device = c10::device_or_default(device_opt);
  TORCH_CHECK(device.type() == kXdev, "xdev empty: expected an xdev device, got ", device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "xdev: only strided tensors are supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "xdev: only CPU tensors can be pinned");
  return c10::Device(kXdev, resolveDevice(device.has_index() ? device.index() : -1));
}

at::Tensor xdevEmpty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                     std::optional<c10::Layout> layout, std::optional<c10::Device> device_opt,
                     std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> format) {
  const c10::Device device = checkedXdevDevice(device_opt, layout, pin_memory);
  c10::DeviceGuard guard(device);
  return at::detail::empty_generic(size, deviceAllocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), format);
}

at::Tensor xdevEmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                            std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                            std::optional<c10::Device> device_opt, std::optional<bool> pin_memory) {
  const c10::Device device = checkedXdevDevice(device_opt, layout, pin_memory);
  c10::DeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, deviceAllocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor xdevAsStrided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<int64_t> offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

at::Tensor xdevView(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor xdevReshapeAlias(const at::Tensor& self, c10::IntArrayRef size,
                            c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor& xdevResize(const at::Tensor& self, c10::IntArrayRef size,
                             std::optional<c10::MemoryFormat> format) {
  // The CPU resize grows the storage through storage->allocator(), which is the xdev
  // allocator, and copies the old bytes on the host: the stream must be idle first.
  c10::DeviceGuard guard(self.device());
  synchronizeCurrentStream(self.device().index());
  const size_t needed = at::detail::computeStorageNbytesContiguous(
      size, self.dtype().itemsize(), static_cast<size_t>(self.storage_offset()));
  if (needed > self.storage().nbytes()) {
    // Grow here rather than in the CPU resize, so the new block is waited for before the
    // host copies the old bytes into it (resizeStorageBytes).
    resizeStorageBytes(self.storage().unsafeGetStorageImpl(), needed);
  }
  return at::native::resize_(self, size, format);
}

at::Tensor& xdevSetStorage(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& xdevSetStorageOffset(at::Tensor& self, c10::Storage source, int64_t offset,
                                 c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, offset, size, stride);
}

at::Tensor& xdevSetTensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

// ---------------------------------------------------------------- copies

bool memcpyable(const at::Tensor& src, const at::Tensor& dst) {
  return src.dtype() == dst.dtype() && src.sizes().equals(dst.sizes()) &&
         src.strides().equals(dst.strides()) && src.is_non_overlapping_and_dense() &&
         src.is_conj() == dst.is_conj() && src.is_neg() == dst.is_neg();
}

// Enqueue a copy on `stream` (of `device`).
void enqueueCopy(void* dst, const void* src, size_t n, xdevMemcpyKind kind, c10::DeviceIndex device,
                 const c10::Stream& stream) {
  DeviceSwitch guard(device);
  XDEV_CHECK(xdevMemcpyAsync(dst, src, n, kind, nativeStream(stream)));
}

void syncStream(c10::DeviceIndex device, const c10::Stream& stream) {
  DeviceSwitch guard(device);
  XDEV_CHECK(xdevStreamSynchronize(nativeStream(stream)));
}

// Makes `waiter` wait (on the device) for the work queued on `signal` so far.
void streamWaitStream(const c10::Stream& waiter, const c10::Stream& signal) {
  xdevEvent_t ev = nullptr;
  {
    DeviceSwitch guard(signal.device_index());
    XDEV_CHECK(xdevEventCreateWithFlags(&ev, xdevEventDisableTiming));
    XDEV_CHECK(xdevEventRecord(ev, nativeStream(signal)));
  }
  {
    DeviceSwitch guard(waiter.device_index());
    XDEV_CHECK(xdevStreamWaitEvent(nativeStream(waiter), ev, 0));
  }
  XDEV_CHECK(xdevEventDestroy(ev));
}

at::Tensor xdevCopyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const at::Tensor& src = self;
  const bool srcX = src.device().type() == kXdev;
  const bool dstX = dst.device().type() == kXdev;
  TORCH_CHECK((srcX || src.is_cpu()) && (dstX || dst.is_cpu()),
              "xdev copy: only copies between xdev and CPU tensors are supported, got ",
              src.device(), " -> ", dst.device());
  if (dst.numel() == 0) {
    return dst;
  }
  const size_t n = dst.numel() * dst.element_size();
  if (memcpyable(src, dst)) {
    if (srcX && dstX) {
      const c10::Stream stream = currentStream(src.device().index());
      if (src.device() != dst.device()) {
        // The copy runs on the source device's current stream, after what the destination's
        // current stream has queued, and the destination's stream waits for it (as CUDA).
        const c10::Stream dstStream = currentStream(dst.device().index());
        streamWaitStream(stream, dstStream);
        enqueueCopy(dst.data_ptr(), src.const_data_ptr(), n, xdevMemcpyDeviceToDevice,
                    src.device().index(), stream);
        streamWaitStream(dstStream, stream);
      } else {
        enqueueCopy(dst.data_ptr(), src.const_data_ptr(), n, xdevMemcpyDeviceToDevice,
                    src.device().index(), stream);
      }
      return dst;
    }
    if (dstX) {  // host -> device
      const c10::DeviceIndex device = dst.device().index();
      const c10::Stream stream = currentStream(device);
      enqueueCopy(dst.data_ptr(), src.const_data_ptr(), n, xdevMemcpyHostToDevice, device, stream);
      if (non_blocking && isPinned(src.storage().data())) {
        recordHostUse(src.storage().data_ptr(), stream);  // keep the pinned block until done
      } else {
        syncStream(device, stream);  // pageable memory: the caller may reuse it at once
      }
      return dst;
    }
    // device -> host
    const c10::DeviceIndex device = src.device().index();
    const c10::Stream stream = currentStream(device);
    enqueueCopy(dst.data_ptr(), src.const_data_ptr(), n, xdevMemcpyDeviceToHost, device, stream);
    if (non_blocking && isPinned(dst.storage().data())) {
      recordHostUse(dst.storage().data_ptr(), stream);
    } else {
      syncStream(device, stream);
    }
    return dst;
  }
  // General case (dtype conversion, broadcasting, strides): the CPU copy kernel on aliases,
  // after the streams of both sides are idle.
  if (srcX) {
    synchronizeCurrentStream(src.device().index());
  }
  if (dstX) {
    synchronizeCurrentStream(dst.device().index());
  }
  AliasSet aliases;
  at::Tensor dstCpu = dstX ? aliases.alias(dst) : dst;
  at::Tensor srcCpu = srcX ? aliases.alias(src) : src;
  dstCpu.copy_(srcCpu);
  return dst;
}

at::Tensor xdevCopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) {
    dst.resize_(self.sizes());
  }
  return xdevCopyFrom(self, dst, false);
}

at::Scalar xdevLocalScalarDense(const at::Tensor& self) {
  synchronizeCurrentStream(self.device().index());
  AliasSet aliases;
  return aliases.alias(self).item();
}

// ---------------------------------------------------------------- queued kernels

struct FillWork {
  void* data;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype;
  at::Scalar value;
};

void runFill(void* arg) {
  std::unique_ptr<FillWork> work(static_cast<FillWork*>(arg));
  at::Tensor t =
      at::from_blob(work->data, work->sizes, work->strides, at::TensorOptions().dtype(work->dtype));
  t.fill_(work->value);
}

// fill_ is queued on the current stream like a kernel launch: it runs after the work queued
// before it and the host does not wait. The pointer stays valid: a block freed before the
// fill runs is only reused by later work on this same stream.
at::Tensor& xdevFill(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) {
    return self;
  }
  if (self.is_conj() || self.is_neg()) {  // rare: do it synchronously through the fallback path
    synchronizeCurrentStream(self.device().index());
    AliasSet aliases;
    aliases.alias(self).fill_(value);
    return self;
  }
  auto* work = new FillWork{self.data_ptr(), self.sizes().vec(), self.strides().vec(),
                            self.scalar_type(), value};
  const c10::DeviceIndex device = self.device().index();
  DeviceSwitch guard(device);
  const xdevError_t err = xdevLaunchHostFunc(currentNativeStream(device), &runFill, work);
  if (err != xdevSuccess) {
    delete work;
    XDEV_CHECK(err);
  }
  return self;
}

at::Tensor& xdevFillTensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  return xdevFill(self, value.item());
}

at::Tensor& xdevZero(at::Tensor& self) { return xdevFill(self, 0); }

void runSleep(void* arg) {
  std::unique_ptr<int64_t> ms(static_cast<int64_t*>(arg));
  std::this_thread::sleep_for(std::chrono::milliseconds(*ms));
}

void xdevRecordStream(at::Tensor& self, c10::Stream stream) {
  deviceAllocator()->recordStream(self.storage().data_ptr(), stream);
}

// ---------------------------------------------------------------- convolution

// torch routes convolutions of out-of-tree devices to convolution_overrideable: run the CPU
// convolution over aliases of the xdev memory.
at::Tensor xdevConvolution(const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                           c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                           c10::IntArrayRef output_padding, int64_t groups) {
  const c10::DeviceIndex device = input.device().index();
  c10::DeviceGuard guard(input.device());
  synchronizeCurrentStream(device);
  AliasSet aliases;
  std::optional<at::Tensor> biasCpu;
  if (bias.has_value() && bias->defined()) {
    biasCpu = aliases.alias(*bias);
  }
  at::Tensor out = at::convolution(aliases.alias(input), aliases.alias(weight), biasCpu, stride,
                                   padding, dilation, transposed, output_padding, groups);
  return copyToNewXdevTensor(out, device);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> xdevConvolutionBackward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  const c10::DeviceIndex device = input.device().index();
  c10::DeviceGuard guard(input.device());
  synchronizeCurrentStream(device);
  AliasSet aliases;
  const int64_t biasSize = transposed ? weight.size(1) * groups : weight.size(0);
  std::vector<int64_t> biasSizes{biasSize};
  auto [gi, gw, gb] = at::convolution_backward(
      aliases.alias(grad_output), aliases.alias(input), aliases.alias(weight),
      output_mask[2] ? std::optional<c10::IntArrayRef>(biasSizes) : std::nullopt, stride, padding,
      dilation, transposed, output_padding, groups, output_mask);
  auto back = [&](const at::Tensor& t) { return t.defined() ? copyToNewXdevTensor(t, device) : t; };
  return {back(gi), back(gw), back(gb)};
}

// ---------------------------------------------------------------- shallow copy

// torch.nn.Module._apply asks `_has_compatible_shallow_copy_type(param, param.to(device))`:
// when true it moves each parameter in place (`param.data = moved`), so tied weights stay
// tied and optimizers built earlier keep their tensors; when false it makes new Parameters.
// torch's own answer (TensorImpl::has_compatible_shallow_copy_type) knows the dense CPU, CUDA,
// MPS, HIP, XPU, HPU and MTIA backends and leaves PrivateUse1 to the backend's kernel. Dense
// xdev memory is host memory described by the same strided metadata, so an xdev tensor and a
// dense tensor of any of those backends can take each other's storage (set_data), exactly as
// CPU and CUDA can (sparse, quantized and nested tensors are not Dense and never match).
bool xdevHasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  const c10::DispatchKeySet selfKeys = self.key_set();
  const c10::DispatchKeySet fromKeys = from.key_set();
  if (selfKeys == fromKeys) {
    return true;
  }
  auto dense = [](c10::DispatchKeySet ks) {
    constexpr auto backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit,
         c10::BackendComponent::MPSBit, c10::BackendComponent::HIPBit,
         c10::BackendComponent::XPUBit, c10::BackendComponent::HPUBit,
         c10::BackendComponent::MTIABit, c10::BackendComponent::PrivateUse1Bit});
    return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && ks.has_any(backends);
  };
  return dense(selfKeys) && dense(fromKeys);
}

}  // namespace

void sleepOnCurrentStream(int64_t ms) {
  const c10::DeviceIndex device = currentDevice();
  auto* arg = new int64_t(ms);
  const xdevError_t err = xdevLaunchHostFunc(currentNativeStream(device), &runSleep, arg);
  if (err != xdevSuccess) {
    delete arg;
    XDEV_CHECK(err);
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", xdevHasCompatibleShallowCopyType);
  m.impl("empty.memory_format", xdevEmpty);
  m.impl("empty_strided", xdevEmptyStrided);
  m.impl("as_strided", xdevAsStrided);
  m.impl("view", xdevView);
  m.impl("_reshape_alias", xdevReshapeAlias);
  m.impl("resize_", xdevResize);
  m.impl("set_.source_Storage", xdevSetStorage);
  m.impl("set_.source_Storage_storage_offset", xdevSetStorageOffset);
  m.impl("set_.source_Tensor", xdevSetTensor);
  m.impl("_copy_from", xdevCopyFrom);
  m.impl("_copy_from_and_resize", xdevCopyFromAndResize);
  m.impl("_local_scalar_dense", xdevLocalScalarDense);
  m.impl("fill_.Scalar", xdevFill);
  m.impl("fill_.Tensor", xdevFillTensor);
  m.impl("zero_", xdevZero);
  m.impl("record_stream", xdevRecordStream);
  m.impl("convolution_overrideable", xdevConvolution);
  m.impl("convolution_backward_overrideable", xdevConvolutionBackward);
}

}  // namespace xdev_torch

namespace xdev_torch {
// _copy_from is device-generic in torch's eyes, so the conjugate/negative fallbacks would
// materialise a conj/neg source by clone(), which copies through _copy_from again: endless
// recursion. Our _copy_from handles the bits itself (memcpy only when they agree, else the
// CPU copy kernel over aliases that carry them), so let it through.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
}  // namespace xdev_torch
