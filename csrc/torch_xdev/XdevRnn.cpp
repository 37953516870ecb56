// Fused RNN cells. torch's LSTM/GRU use _thnn_fused_lstm_cell / _thnn_fused_gru_cell on
// accelerators (CUDA, XPU, PrivateUse1), and those have no CPU kernel, so the fallback cannot
// serve them. These kernels compute the same thing with aten ops on the xdev tensors (each
// goes through the fallback) and keep CUDA's workspace layout, so torch's derivative formulas
// (which call the backward kernels below) apply unchanged:
//   LSTM workspace = [i | f | g | o] (activated gates), GRU workspace = [r | z | n | hx | hn].
#include <ATen/ATen.h>
#include <torch/library.h>

namespace xdev_torch {
namespace {

at::Tensor withBias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor gates = withBias(input_gates, input_bias) + withBias(hidden_gates, hidden_bias);
  auto chunks = gates.chunk(4, 1);
  at::Tensor i = chunks[0].sigmoid();
  at::Tensor f = chunks[1].sigmoid();
  at::Tensor g = chunks[2].tanh();
  at::Tensor o = chunks[3].sigmoid();
  at::Tensor cy = f * cx + i * g;
  at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellBackward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const bool hasHy = grad_hy.has_value() && grad_hy->defined();
  const bool hasCy = grad_cy.has_value() && grad_cy->defined();
  if (!hasHy && !hasCy) {
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
  auto chunks = workspace.chunk(4, 1);
  const at::Tensor &i = chunks[0], &f = chunks[1], &g = chunks[2], &o = chunks[3];
  at::Tensor tanhCy = cy.tanh();
  at::Tensor gho = hasHy ? *grad_hy : at::zeros_like(cy);
  at::Tensor gcx = hasCy ? grad_cy->clone() : at::zeros_like(cy);
  gcx = gcx + gho * o * (1 - tanhCy * tanhCy);
  at::Tensor go = gho * tanhCy * o * (1 - o);
  at::Tensor gi = gcx * g * i * (1 - i);
  at::Tensor gf = gcx * cx * f * (1 - f);
  at::Tensor gg = gcx * i * (1 - g * g);
  at::Tensor gradGates = at::cat({gi, gf, gg, go}, 1);
  at::Tensor gradCx = gcx * f;
  at::Tensor gradBias = has_bias ? gradGates.sum(0) : at::Tensor();
  return {gradGates, gradCx, gradBias};
}

std::tuple<at::Tensor, at::Tensor> gruCell(const at::Tensor& input_gates,
                                           const at::Tensor& hidden_gates, const at::Tensor& hx,
                                           const std::optional<at::Tensor>& input_bias,
                                           const std::optional<at::Tensor>& hidden_bias) {
  auto in = withBias(input_gates, input_bias).chunk(3, 1);
  auto hid = withBias(hidden_gates, hidden_bias).chunk(3, 1);
  at::Tensor r = (in[0] + hid[0]).sigmoid();
  at::Tensor z = (in[1] + hid[1]).sigmoid();
  at::Tensor n = (in[2] + r * hid[2]).tanh();
  at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hid[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gruCellBackward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  auto w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  at::Tensor gradHx = grad_hy * z;
  at::Tensor gz = grad_hy * (hx - n) * z * (1 - z);
  at::Tensor gn = grad_hy * (1 - z) * (1 - n * n);
  at::Tensor gr = gn * hn * r * (1 - r);
  at::Tensor gradInput = at::cat({gr, gz, gn}, 1);
  at::Tensor gradHidden = at::cat({gr, gz, gn * r}, 1);
  at::Tensor gradInputBias = has_bias ? gradInput.sum(0) : at::Tensor();
  at::Tensor gradHiddenBias = has_bias ? gradHidden.sum(0) : at::Tensor();
  return {gradInput, gradHidden, gradHx, gradInputBias, gradHiddenBias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", lstmCell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", lstmCellBackward);
  m.impl("_thnn_fused_gru_cell", gruCell);
  m.impl("_thnn_fused_gru_cell_backward", gruCellBackward);
}

}  // namespace xdev_torch
