"""OpenReg tests that are skipped on xdev, each with the reason (tests/openreg/run_openreg.py).
Keys are module::Class::test of PyTorch's files; a key that no longer exists is reported (the
files change between torch releases), not an error.

Three kinds of reason: the test exercises OpenReg's own extension (custom operators, kernels
and module functions only OpenReg defines); the test asks for something xdev does not have,
said plainly (quantized tensors); or the test file expects a torch newer than 2.13.0.
"""

_OPENREG_OPS = ("OpenReg's own custom operator torch.ops.openreg.{op}, defined by its C++ "
                "extension for this test; xdev defines no custom operators")

SKIPS: dict[str, str] = {
    # -- OpenReg's own extension
    "test_ops::TestAutogradFunction::test_compile_autograd_function_aliasing":
        _OPENREG_OPS.format(op="custom_autograd_fn_aliasing"),
    "test_ops::TestAutogradFunction::test_compile_autograd_function_returns_self":
        _OPENREG_OPS.format(op="custom_autograd_fn_returns_self"),
    "test_ops::TestCustomAutogradFunctions::test_custom_autograd_fn_aliasing_basic":
        _OPENREG_OPS.format(op="custom_autograd_fn_aliasing"),
    "test_ops::TestCustomAutogradFunctions::test_custom_autograd_fn_aliasing_no_grad":
        _OPENREG_OPS.format(op="custom_autograd_fn_aliasing"),
    "test_ops::TestCustomAutogradFunctions::test_custom_autograd_fn_returns_self_basic":
        _OPENREG_OPS.format(op="custom_autograd_fn_returns_self"),
    "test_ops::TestCustomAutogradFunctions::test_custom_autograd_fn_returns_self_no_grad":
        _OPENREG_OPS.format(op="custom_autograd_fn_returns_self"),
    "test_ops::TestSTUBExtended::test_custom_abs": _OPENREG_OPS.format(op="custom_abs"),
    "test_ops::TestSDPA::test_fused_sdp_choice_privateuseone":
        "OpenReg registers its own attention kernel (_fused_sdp_choice answering OVERRIDEABLE, "
        "_scaled_dot_product_fused_attention_overrideable); xdev runs "
        "scaled_dot_product_attention through the CPU's kernels (the sdpa forward tests pass)",
    "test_ops::TestSDPA::test_scaled_dot_product_fused_attention_overrideable_backward":
        "calls _scaled_dot_product_fused_attention_overrideable directly, an attention kernel "
        "OpenReg implements; xdev has none (its sdpa is the CPU's)",
    "test_ops::TestSDPAExtended::test_fused_sdp_choice_with_mask":
        "OpenReg's _fused_sdp_choice answers OVERRIDEABLE for its own attention kernel; xdev "
        "has no such kernel and answers what the CPU answers",
    "test_rng::TestRNG::test_offset_unsupported":
        "torch.openreg.set_offset/get_offset are functions of OpenReg's module; xdev's "
        "generators are the CPU's mt19937, which has no offset either "
        "(Generator.set_offset raises 'CPU Generator does not use offset')",
    "test_autocast::TestAutocast::test_xdev_autocast_float32_supported":
        "OpenReg's example autocast list puts dot in float32; xdev registers CUDA's lists, "
        "where dot is 'promote' (two float16 inputs stay float16), as on CUDA",
    # -- what xdev does not have
    "test_device::TestDevice::test_device_capability":
        "expects the quantized dtypes; xdev has no quantized tensors (no QuantizedPrivateUse1 "
        "kernels: torch.empty(dtype=torch.qint8, device='xdev') fails), so its capability "
        "truthfully leaves them out (every other dtype is in it: test_xdev_device.py)",
    # -- the file expects a newer torch than 2.13.0
    "test_ops::TestFactory::test_empty":
        "torch 2.13.0+cpu has no named-tensor factories: torch.empty(..., names=...) raises "
        "TypeError on the CPU too",
    "test_autocast::TestAutocast::test_xdev_autocast_error_message":
        "torch 2.13.0's warning does not name the dtype ('In xdev autocast, but the target "
        "dtype is not supported. Disabling autocast.'); this file expects a later wording",
    "test_device::TestDevice::test_device_properties":
        "expects torch.accelerator.get_memory_info() to return a dict; torch 2.13.0 returns "
        "(free, total)",
}
