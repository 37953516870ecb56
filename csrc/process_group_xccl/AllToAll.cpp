// AllToAll.cpp — the c10d all-to-all collectives, even or by split sizes (alltoall_base)
// and by tensor lists (alltoall), both on libxccl's xcclAllToAll(v).
#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

namespace {
// Element counts and displacements of a dim-0 split of `t` (empty splits = even split).
void splitCounts(const char* op, const char* what, const at::Tensor& t,
                 const std::vector<int64_t>& splits, int size, std::vector<size_t>& counts,
                 std::vector<size_t>& displs) {
  counts.assign(size, 0);
  displs.assign(size, 0);
  int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  int64_t rowElems = rows == 0 ? 0 : t.numel() / rows;
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "xccl ", op, ": ", what, " dim 0 (", rows,
                ") is not divisible by the group size ", size, "; pass split sizes");
    for (int i = 0; i < size; ++i) {
      counts[i] = static_cast<size_t>(rows / size * rowElems);
      displs[i] = static_cast<size_t>(i * (rows / size) * rowElems);
    }
    return;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "xccl ", op, ": ", what,
              " split sizes must have one entry per rank (", size, "), got ", splits.size());
  int64_t sum = 0;
  for (int i = 0; i < size; ++i) {
    TORCH_CHECK(splits[i] >= 0, "xccl ", op, ": negative ", what, " split size ", splits[i]);
    counts[i] = static_cast<size_t>(splits[i] * rowElems);
    displs[i] = static_cast<size_t>(sum * rowElems);
    sum += splits[i];
  }
  TORCH_CHECK(sum == rows, "xccl ", op, ": ", what, " split sizes sum to ", sum,
              " but dim 0 of the ", what, " tensor is ", rows);
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::alltoall_base(at::Tensor& output,
                                                               at::Tensor& input,
                                                               std::vector<int64_t>& outputSplits,
                                                               std::vector<int64_t>& inputSplits,
                                                               const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  checkTensor(op, input, "input");
  checkTensor(op, output, "output");
  checkSame(op, input, output);
  int size = getSize();
  std::vector<size_t> sc, sd, rc, rd;
  splitCounts(op, "input", input, inputSplits, size, sc, sd);
  splitCounts(op, "output", output, outputSplits, size, rc, rd);
  at::Tensor in = contig(input), out = contig(output);
  CopyBack cb;
  cb.add(output, out);
  auto dt = toXcclType(op, input.scalar_type());
  bool even = inputSplits.empty() && outputSplits.empty();
  if (even) {
    TORCH_CHECK(input.numel() == output.numel(), "xccl ", op,
                ": input and output must have the same number of elements, got ", input.numel(),
                " and ", output.numel());
  }
  return launch({.name = op,
                 .type = c10d::OpType::ALLTOALL_BASE,
                 .inputs = input,
                 .timeout = opts.timeout,
                 .outputs = {output},
                 .keepAlive = {in, out},
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       if (even) {
                         return xcclAllToAll(in.data_ptr(), out.data_ptr(), in.numel() / size, dt,
                                             tg.comm, tg.stream);
                       }
                       return xcclAllToAllv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(),
                                            rc.data(), rd.data(), dt, tg.comm, tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall";
  int size = getSize();
  TORCH_CHECK(static_cast<int>(inputs.size()) == size && static_cast<int>(outputs.size()) == size,
              "xccl ", op, ": expected one input and one output tensor per rank (", size, "), got ",
              inputs.size(), " and ", outputs.size());
  std::vector<size_t> sc(size), sd(size), rc(size), rd(size);
  std::vector<at::Tensor> parts;
  size_t s = 0, r = 0;
  for (int i = 0; i < size; ++i) {
    checkTensor(op, inputs[i], "input");
    checkTensor(op, outputs[i], "output");
    checkSame(op, inputs[0], inputs[i]);
    checkSame(op, inputs[0], outputs[i]);
    sc[i] = inputs[i].numel();
    sd[i] = s;
    s += sc[i];
    rc[i] = outputs[i].numel();
    rd[i] = r;
    r += rc[i];
    parts.push_back(inputs[i].reshape({-1}));
  }
  at::Tensor flatIn = at::cat(parts).contiguous();
  at::Tensor flatOut = at::empty({static_cast<int64_t>(r)}, inputs[0].options());
  auto outs = outputs;
  std::function<void()> post = [outs, flatOut, rc, rd]() {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flatOut.narrow(0, static_cast<int64_t>(rd[i]), static_cast<int64_t>(rc[i]))
                        .view(outs[i].sizes()));
    }
  };
  auto dt = toXcclType(op, inputs[0].scalar_type());
  return launch({.name = op,
                 .type = c10d::OpType::ALLTOALL,
                 .inputs = inputs,
                 .timeout = opts.timeout,
                 .outputs = outputs,
                 .keepAlive = {flatIn, flatOut},
                 .post = post,
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclAllToAllv(flatIn.data_ptr(), sc.data(), sd.data(),
                                            flatOut.data_ptr(), rc.data(), rd.data(), dt, tg.comm,
                                            tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

}  // namespace torch_xccl
