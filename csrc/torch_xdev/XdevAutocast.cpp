// Autocast (mixed precision) for xdev: the AutocastPrivateUse1 dispatch key gets the same op
// lists and cast policies as CUDA's and XPU's. torch keeps those lists in the AT_FORALL_*
// macros of ATen/autocast_mode.h precisely so that other backends can register them; using
// the macros (not a copy) keeps xdev's lists equal to CUDA's for the torch it is built against.
//
//   lower_precision_fp   matmuls, convolutions, linear, RNN cells, attention: run in the
//                        autocast dtype (torch.float16 or torch.bfloat16)
//   fp32                 numerically sensitive ops (exp, log, norms, losses, ...): run in float32
//   fp32_set_opt_dtype   reductions with a dtype argument (sum, softmax, cumsum, ...): float32
//   fp32_append_dtype    norm: redispatched with dtype=float32
//   promote              ops with several floating inputs (addcmul, cross, ...): widest input
//
// binary_cross_entropy is refused inside an autocast region, as on CUDA. Every other op falls
// through to the xdev kernels, which run the CPU kernel in whatever dtype reaches them (the
// CPU has float16 and bfloat16 kernels for all of the lower_precision_fp ops).
// torch_xccl/xdev.py: get_amp_supported_dtype() answers [float16, bfloat16].
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace xdev_torch {
namespace {

// The signatures in AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE name these types unqualified
// (torch 2.11's list also has norm.names_ScalarOpt_dim, with a DimnameList; 2.13 removed named
// tensors, and Dimname.h with them).
#if __has_include(<ATen/core/Dimname.h>)
using at::DimnameList;
#endif
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

Tensor binaryCrossEntropyRefused(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                 int64_t) {
  TORCH_CHECK(false,
              "xdev autocast: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss "
              "are not safe to autocast (a lower-precision probability saturates). Use "
              "binary_cross_entropy_with_logits / BCEWithLogitsLoss, which autocast runs in "
              "float32, or leave the autocast region for this loss (as on CUDA).");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define XDEV_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define XDEV_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define XDEV_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define XDEV_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(XDEV_LOWER_PRECISION_FP)
  AT_FORALL_FP32(XDEV_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(XDEV_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(XDEV_PROMOTE)
#undef XDEV_LOWER_PRECISION_FP
#undef XDEV_FP32
#undef XDEV_FP32_SET_OPT_DTYPE
#undef XDEV_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN((&binaryCrossEntropyRefused)));
}

}  // namespace
}  // namespace xdev_torch
