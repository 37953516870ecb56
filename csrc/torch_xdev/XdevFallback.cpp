// The boxed fallback: every aten op without an explicit xdev kernel runs its CPU kernel on the
// xdev memory itself, without copying it.
//
//   1. Find the op's xdev device (first xdev tensor, else an xdev Device argument) and check
//      that no other device takes part (torch's "Expected all tensors to be on the same
//      device" error; 0-dim CPU tensors and CPU indices in Tensor?[] are allowed, as on CUDA).
//   2. Synchronise that device's current stream: the op runs after the work queued before it.
//   3. Replace each xdev tensor by a CPU alias (same memory, sizes, strides, offset; one alias
//      storage per xdev storage), an xdev Device argument by "cpu", an xdev or absent
//      Generator by the device generator's CPU generator.
//   4. Redispatch to the CPU kernel.
//   5. Write back what the kernel changed in place: an alias storage the kernel resized hands
//      its new (xdev) memory to the xdev storage; changed sizes/strides go to the xdev tensor;
//      a storage the kernel swapped (set_) is copied into new xdev memory.
//   6. Re-wrap results: an alias of an argument returns that argument itself (in-place and
//      out= ops); a view of an argument's memory becomes an xdev view of the same storage;
//      anything else (new memory) is copied into a fresh xdev tensor.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "XdevFunctions.h"
#include "XdevGenerator.h"
#include "XdevOps.h"

namespace xdev_torch {
namespace {

struct Converted {
  at::Tensor xdev;
  at::Tensor cpu;
};

std::string deviceName(const c10::Device& d) { return d.str(); }

class DeviceCheck {
 public:
  explicit DeviceCheck(const c10::OperatorHandle& op) : op_(op) {}

  void see(const at::Tensor& t, bool cpuAllowed) {
    if (!t.defined()) {
      return;
    }
    if (t.device().type() == kXdev) {
      if (!device_) {
        device_ = t.device();
      } else if (*device_ != t.device()) {
        fail(*device_, t.device());
      }
      return;
    }
    if (t.is_cpu() && (cpuAllowed || t.dim() == 0)) {
      return;
    }
    other_ = t.device();
  }

  void seeDevice(const c10::Device& d) {
    if (!deviceArg_) {
      deviceArg_ = d;
    }
  }

  c10::Device finish() {
    if (!device_) {
      TORCH_CHECK(deviceArg_.has_value(), "xdev fallback for ", op_.schema().operator_name(),
                  ": no xdev tensor or device among the arguments");
      device_ =
          c10::Device(kXdev, resolveDevice(deviceArg_->has_index() ? deviceArg_->index() : -1));
    }
    if (other_) {
      fail(*device_, *other_);
    }
    return *device_;
  }

 private:
  [[noreturn]] void fail(const c10::Device& a, const c10::Device& b) {
    TORCH_CHECK(false,
                "Expected all tensors to be on the same device, but found at least two devices, ",
                deviceName(a), " and ", deviceName(b), "! (while running ",
                op_.schema().operator_name(), " on xdev)");
  }

  const c10::OperatorHandle& op_;
  std::optional<c10::Device> device_;
  std::optional<c10::Device> deviceArg_;
  std::optional<c10::Device> other_;
};

bool isOptionalGenerator(const c10::Argument& arg) {
  const auto& type = arg.type();
  if (type->kind() == c10::TypeKind::GeneratorType) {
    return true;
  }
  if (auto opt = type->cast<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

at::Tensor rewrap(const at::Tensor& r, const AliasSet& aliases,
                  const std::vector<Converted>& converted, c10::DeviceIndex device) {
  if (!r.defined() || !r.is_cpu()) {
    return r;
  }
  for (const Converted& c : converted) {
    if (c.cpu.unsafeGetTensorImpl() == r.unsafeGetTensorImpl()) {
      return c.xdev;  // in-place / out=: the argument itself
    }
  }
  if (r.has_storage()) {
    if (const c10::Storage* original = aliases.original(r.storage().unsafeGetStorageImpl())) {
      return xdevTensorOver(*original, r);  // a view of an argument's memory
    }
  }
  return copyToNewXdevTensor(r, device);
}

void xdevFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t nargs = arguments.size();
  const size_t base = stack->size() - nargs;

  // 1. device
  DeviceCheck check(op);
  for (size_t i = 0; i < nargs; ++i) {
    const c10::IValue& v = (*stack)[base + i];
    if (v.isTensor()) {
      check.see(v.toTensor(), false);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        check.see(t, false);
      }
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) {
          check.see(e.toTensor(), /*cpuAllowed=*/true);  // Tensor?[] indices may live on CPU
        }
      }
    } else if (v.isDevice() && v.toDevice().type() == kXdev) {
      check.seeDevice(v.toDevice());
    }
  }
  const c10::Device device = check.finish();
  const c10::DeviceIndex index = device.index();
  c10::DeviceGuard guard(device);

  // 2. order after the queued work
  synchronizeCurrentStream(index);

  // 3. arguments -> CPU
  AliasSet aliases;
  std::vector<Converted> converted;
  auto toCpu = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.device().type() != kXdev) {
      return t;
    }
    at::Tensor cpu = aliases.alias(t);
    converted.push_back({t, cpu});
    return cpu;
  };
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[base + i];
    if (v.isTensor()) {
      v = toCpu(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      list.reserve(v.toTensorList().size());
      for (const at::Tensor& t : v.toTensorList()) {
        list.push_back(toCpu(t));
      }
      v = std::move(list);
    } else if (v.isList() && arguments[i].type()->kind() == c10::TypeKind::ListType) {
      auto elem = arguments[i].type()->castRaw<c10::ListType>()->getElementType();
      if (elem->kind() == c10::TypeKind::OptionalType &&
          elem->castRaw<c10::OptionalType>()->getElementType()->kind() ==
              c10::TypeKind::TensorType) {
        c10::List<std::optional<at::Tensor>> list;
        for (const c10::IValue& e : v.toListRef()) {
          list.push_back(e.isTensor() ? std::optional<at::Tensor>(toCpu(e.toTensor()))
                                      : std::nullopt);
        }
        v = std::move(list);
      }
    } else if (v.isDevice() && v.toDevice().type() == kXdev) {
      v = c10::Device(c10::kCPU);
    } else if (isOptionalGenerator(arguments[i])) {
      v = v.isNone() ? toCpuGenerator(defaultGenerator(index)) : toCpuGenerator(v.toGenerator());
    }
  }

  // 4. the CPU kernel
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  // 5. in-place effects back onto the xdev tensors
  aliases.adoptResizedStorages();
  for (const Converted& c : converted) {
    c10::TensorImpl* x = c.xdev.unsafeGetTensorImpl();
    const c10::TensorImpl* a = c.cpu.unsafeGetTensorImpl();
    if (aliases.original(a->storage().unsafeGetStorageImpl()) == nullptr) {
      // The kernel gave the argument other memory (set_): move it to xdev memory.
      at::Tensor moved = copyToNewXdevTensor(c.cpu, index);
      x->set_storage_keep_dtype(moved.storage());
      x->set_sizes_and_strides(c.cpu.sizes(), c.cpu.strides(), c.cpu.storage_offset());
      continue;
    }
    if (!x->sizes().equals(a->sizes()) || !x->strides().equals(a->strides()) ||
        x->storage_offset() != a->storage_offset()) {
      x->set_sizes_and_strides(a->sizes(), a->strides(), a->storage_offset());
    }
  }

  // 6. results -> xdev
  const size_t nret = schema.returns().size();
  const size_t rbase = stack->size() - nret;
  for (size_t i = 0; i < nret; ++i) {
    c10::IValue& r = (*stack)[rbase + i];
    if (r.isTensor()) {
      r = rewrap(r.toTensor(), aliases, converted, index);
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : r.toTensorList()) {
        list.push_back(rewrap(t, aliases, converted, index));
      }
      r = std::move(list);
    }
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&xdevFallback>());
}

}  // namespace xdev_torch
