// Collectives.cpp — every c10d collective and point-to-point op of ProcessGroupXCCL: check
// the arguments, stage contiguous / flat buffers, enqueue on libxccl through launch().
#include <numeric>

#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, opts.rootRank, getSize(), "root rank");
  TORCH_CHECK(opts.rootTensor == 0, "xccl ", op, ": invalid root tensor ", opts.rootTensor);
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  int root = static_cast<int>(opts.rootRank);
  size_t n = buf.numel();
  return launch({.name = op,
                 .type = c10d::OpType::BROADCAST,
                 .inputs = t,
                 .timeout = opts.timeout,
                 .outputs = {t},
                 .keepAlive = {buf},
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclBroadcast(buf.data_ptr(), buf.data_ptr(), n, dt, root, tg.comm,
                                            tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

namespace {
// One allreduce enqueue on a contiguous buffer; `factor` is the PREMUL_SUM scalar (or undefined).
xcclResult_t enqueueAllreduce(const char* op, const at::Tensor& buf, xcclRedOp_t xop,
                              const at::Tensor& factor, const Target& tg) {
  auto dt = toXcclType(op, buf.scalar_type());
  if (xop == xcclPremulSum) {
    return xcclAllReducePremulSum(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt,
                                  factor.data_ptr(), tg.comm, tg.stream);
  }
  return xcclAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, xop, tg.comm, tg.stream);
}

// One grouped launch of an allgather per (input, output) pair: the coalesced allgathers.
xcclResult_t allGatherEach(const char* op, const std::vector<at::Tensor>& ins,
                           const std::vector<at::Tensor>& outs, const Target& tg) {
  return grouped([&] {
    for (size_t i = 0; i < ins.size(); ++i) {
      auto r = xcclAllGather(ins[i].data_ptr(), outs[i].data_ptr(), ins[i].numel(),
                             toXcclType(op, ins[i].scalar_type()), tg.comm, tg.stream);
      if (r != xcclSuccess) return r;
    }
    return xcclSuccess;
  });
}

// reduce / reduce_scatter have no premul variant: scale a copy, then SUM.
at::Tensor premulScaled(const char* op, const at::Tensor& input, const c10d::ReduceOp& rop) {
  at::Tensor f = premulFactor(op, rop, input.scalar_type());
  return (input.contiguous() * f.to(input.device())).contiguous();
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  const at::Tensor& t = single(op, tensors);
  TORCH_CHECK(!opts.sparseIndices.has_value(), "xccl ", op, ": sparse allreduce is not supported");
  auto xop = toXcclOp(op, opts.reduceOp, t.scalar_type());
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  std::vector<at::Tensor> keep{buf};
  at::Tensor factor;
  if (xop == xcclPremulSum) {
    factor = premulFactor(op, opts.reduceOp, t.scalar_type());
    keep.push_back(factor);
  }
  return launch(
      {.name = op,
       .type = c10d::OpType::ALLREDUCE,
       .inputs = t,
       .timeout = opts.timeout,
       .outputs = {t},
       .keepAlive = keep,
       .post = cb.fn(),
       .enqueue = [&](const Target& tg) { return enqueueAllreduce(op, buf, xop, factor, tg); },
       .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "xccl ", op, ": no tensors");
  for (const auto& t : tensors) {
    checkTensor(op, t);
    checkSame(op, tensors[0], t);
  }
  auto xop = toXcclOp(op, opts.reduceOp, tensors[0].scalar_type());
  std::vector<at::Tensor> bufs;
  CopyBack cb;
  for (const auto& t : tensors) {
    bufs.push_back(contig(t));
    cb.add(t, bufs.back());
  }
  std::vector<at::Tensor> keep = bufs;
  at::Tensor factor;
  if (xop == xcclPremulSum) {
    factor = premulFactor(op, opts.reduceOp, tensors[0].scalar_type());
    keep.push_back(factor);
  }
  return launch({.name = op,
                 .type = c10d::OpType::ALLREDUCE_COALESCED,
                 .inputs = tensors,
                 .timeout = opts.timeout,
                 .outputs = tensors,
                 .keepAlive = keep,
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return grouped([&] {
                         for (const auto& b : bufs) {
                           auto r = enqueueAllreduce(op, b, xop, factor, tg);
                           if (r != xcclSuccess) return r;
                         }
                         return xcclSuccess;
                       });
                     },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, opts.rootRank, getSize(), "root rank");
  TORCH_CHECK(opts.rootTensor == 0, "xccl ", op, ": invalid root tensor ", opts.rootTensor);
  auto xop = toXcclOp(op, opts.reduceOp, t.scalar_type());
  at::Tensor buf = contig(t);
  at::Tensor send = buf;
  if (xop == xcclPremulSum) {
    send = premulScaled(op, t, opts.reduceOp);
    xop = xcclSum;
  }
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  int root = static_cast<int>(opts.rootRank);
  return launch({.name = op,
                 .type = c10d::OpType::REDUCE,
                 .inputs = t,
                 .timeout = opts.timeout,
                 .outputs = {t},
                 .keepAlive = {buf, send},
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclReduce(send.data_ptr(), buf.data_ptr(), buf.numel(), dt, xop,
                                         root, tg.comm, tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "_allgather_base";
  checkTensor(op, input, "input");
  checkTensor(op, output, "output");
  checkSame(op, input, output);
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "xccl ", op,
              ": output must have world_size * input elements (", input.numel() * getSize(),
              "), got ", output.numel());
  at::Tensor in = contig(input), out = contig(output);
  CopyBack cb;
  cb.add(output, out);
  auto dt = toXcclType(op, input.scalar_type());
  return launch({.name = op,
                 .type = c10d::OpType::_ALLGATHER_BASE,
                 .inputs = input,
                 .timeout = opts.timeout,
                 .outputs = {output},
                 .keepAlive = {in, out},
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dt, tg.comm,
                                            tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  const at::Tensor& in0 = single(op, inputs, "input tensor");
  TORCH_CHECK(outputs.size() == 1, "xccl ", op, ": expected one output list, got ", outputs.size());
  checkList(op, outputs[0], in0, getSize(), "the output list");
  at::Tensor in = contig(in0);
  at::Tensor flat = at::empty({static_cast<int64_t>(getSize()) * in.numel()}, in.options());
  auto outs = outputs[0];
  auto dt = toXcclType(op, in.scalar_type());
  int64_t n = in.numel();
  std::function<void()> post = [outs, flat, n]() {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(outs[i].sizes()));
    }
  };
  return launch({.name = op,
                 .type = c10d::OpType::ALLGATHER,
                 .inputs = in0,
                 .timeout = opts.timeout,
                 .outputs = outs,
                 .keepAlive = {in, flat},
                 .post = post,
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclAllGather(in.data_ptr(), flat.data_ptr(), n, dt, tg.comm,
                                            tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  TORCH_CHECK(outputLists.size() == static_cast<size_t>(getSize()), "xccl ", op,
              ": expected one output list per rank (", getSize(), "), got ", outputLists.size());
  TORCH_CHECK(!inputs.empty(), "xccl ", op, ": no input tensors");
  for (const auto& t : inputs) {
    checkTensor(op, t);
    checkSame(op, inputs[0], t);
  }
  std::vector<at::Tensor> ins, flats, keep, outs;
  for (size_t j = 0; j < inputs.size(); ++j) {
    ins.push_back(contig(inputs[j]));
    flats.push_back(
        at::empty({static_cast<int64_t>(getSize()) * inputs[j].numel()}, inputs[j].options()));
  }
  for (auto& list : outputLists) {
    TORCH_CHECK(list.size() == inputs.size(), "xccl ", op,
                ": every output list must match the inputs (", inputs.size(), " tensors), got ",
                list.size());
    for (size_t j = 0; j < list.size(); ++j) {
      checkSame(op, inputs[0], list[j]);
      TORCH_CHECK(list[j].numel() == inputs[j].numel(), "xccl ", op, ": output tensor ", j,
                  " must have ", inputs[j].numel(), " elements, got ", list[j].numel());
      outs.push_back(list[j]);
    }
  }
  keep = ins;
  keep.insert(keep.end(), flats.begin(), flats.end());
  auto lists = outputLists;
  std::function<void()> post = [lists, flats]() {
    for (size_t r = 0; r < lists.size(); ++r) {
      for (size_t j = 0; j < lists[r].size(); ++j) {
        int64_t n = lists[r][j].numel();
        lists[r][j].copy_(
            flats[j].narrow(0, static_cast<int64_t>(r) * n, n).view(lists[r][j].sizes()));
      }
    }
  };
  return launch({.name = op,
                 .type = c10d::OpType::ALLGATHER_COALESCED,
                 .inputs = inputs,
                 .timeout = opts.timeout,
                 .outputs = outs,
                 .keepAlive = keep,
                 .post = post,
                 .enqueue = [&](const Target& tg) { return allGatherEach(op, ins, flats, tg); },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size(), "xccl ", op, ": ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  std::vector<at::Tensor> ins, outs, keep;
  CopyBack cb;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(op, inputs[i], "input");
    checkTensor(op, outputs[i], "output");
    checkSame(op, inputs[i], outputs[i]);
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * getSize(), "xccl ", op, ": output ", i,
                " must have world_size * input elements (", inputs[i].numel() * getSize(),
                "), got ", outputs[i].numel());
    ins.push_back(contig(inputs[i]));
    outs.push_back(contig(outputs[i]));
    cb.add(outputs[i], outs.back());
  }
  keep = ins;
  keep.insert(keep.end(), outs.begin(), outs.end());
  return launch({.name = op,
                 .type = c10d::OpType::COALESCED,
                 .inputs = inputs,
                 .timeout = opts.timeout,
                 .outputs = outputs,
                 .keepAlive = keep,
                 .post = cb.fn(),
                 .enqueue = [&](const Target& tg) { return allGatherEach(op, ins, outs, tg); },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const char* op = "gather";
  checkRank(op, opts.rootRank, getSize(), "root rank");
  const at::Tensor& in0 = single(op, inputs, "input tensor");
  bool isRoot = getRank() == opts.rootRank;
  at::Tensor in = contig(in0);
  int64_t n = in.numel();
  at::Tensor flat;
  std::vector<at::Tensor> outs;
  std::function<void()> post;
  if (isRoot) {
    TORCH_CHECK(outputs.size() == 1, "xccl ", op, ": the root expects one output list, got ",
                outputs.size());
    checkList(op, outputs[0], in0, getSize(), "the output list");
    outs = outputs[0];
    flat = at::empty({static_cast<int64_t>(getSize()) * n}, in.options());
    post = [outs, flat, n]() {
      for (size_t i = 0; i < outs.size(); ++i) {
        outs[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(outs[i].sizes()));
      }
    };
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "xccl ", op,
                ": only the root (rank ", opts.rootRank, ") may pass an output list");
  }
  auto dt = toXcclType(op, in.scalar_type());
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> keep{in};
  if (flat.defined()) keep.push_back(flat);
  return launch({.name = op,
                 .type = c10d::OpType::GATHER,
                 .inputs = in0,
                 .timeout = opts.timeout,
                 .outputs = outs,
                 .keepAlive = keep,
                 .post = post,
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclGather(in.data_ptr(), isRoot ? flat.data_ptr() : nullptr, n, dt,
                                         root, tg.comm, tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  checkRank(op, opts.rootRank, getSize(), "root rank");
  const at::Tensor& out0 = single(op, outputs, "output tensor");
  bool isRoot = getRank() == opts.rootRank;
  at::Tensor out = contig(out0);
  at::Tensor flat;
  if (isRoot) {
    TORCH_CHECK(inputs.size() == 1, "xccl ", op, ": the root expects one input list, got ",
                inputs.size());
    checkList(op, inputs[0], out0, getSize(), "the input list");
    std::vector<at::Tensor> parts;
    for (const auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
    flat = at::cat(parts).contiguous();
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "xccl ", op,
                ": only the root (rank ", opts.rootRank, ") may pass an input list");
  }
  CopyBack cb;
  cb.add(out0, out);
  auto dt = toXcclType(op, out.scalar_type());
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> keep{out};
  if (flat.defined()) keep.push_back(flat);
  auto rootInputs = isRoot ? c10::ArrayRef<at::Tensor>(inputs[0]) : c10::ArrayRef<at::Tensor>();
  return launch({.name = op,
                 .type = c10d::OpType::SCATTER,
                 .inputs = rootInputs,
                 .timeout = opts.timeout,
                 .outputs = {out0},
                 .keepAlive = keep,
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclScatter(isRoot ? flat.data_ptr() : nullptr, out.data_ptr(),
                                          out.numel(), dt, root, tg.comm, tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

namespace {
// Input of a reduce-scatter, with PREMUL_SUM folded into a scaled copy.
at::Tensor reduceScatterSend(const char* op, const at::Tensor& in, const c10d::ReduceOp& rop,
                             xcclRedOp_t& xop) {
  if (xop == xcclPremulSum) {
    xop = xcclSum;
    return premulScaled(op, in, rop);
  }
  return contig(in);
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  const at::Tensor& out0 = single(op, outputs, "output tensor");
  TORCH_CHECK(inputs.size() == 1, "xccl ", op, ": expected one input list, got ", inputs.size());
  checkList(op, inputs[0], out0, getSize(), "the input list");
  auto xop = toXcclOp(op, opts.reduceOp, out0.scalar_type());
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
  at::Tensor send = reduceScatterSend(op, at::cat(parts), opts.reduceOp, xop);
  at::Tensor out = contig(out0);
  CopyBack cb;
  cb.add(out0, out);
  auto dt = toXcclType(op, out.scalar_type());
  return launch({.name = op,
                 .type = c10d::OpType::REDUCE_SCATTER,
                 .inputs = inputs[0],
                 .timeout = opts.timeout,
                 .outputs = {out0},
                 .keepAlive = {send, out},
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclReduceScatter(send.data_ptr(), out.data_ptr(), out.numel(), dt,
                                                xop, tg.comm, tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* op = "_reduce_scatter_base";
  checkTensor(op, input, "input");
  checkTensor(op, output, "output");
  checkSame(op, input, output);
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "xccl ", op,
              ": input must have world_size * output elements (", output.numel() * getSize(),
              "), got ", input.numel());
  auto xop = toXcclOp(op, opts.reduceOp, input.scalar_type());
  at::Tensor send = reduceScatterSend(op, input, opts.reduceOp, xop);
  at::Tensor out = contig(output);
  CopyBack cb;
  cb.add(output, out);
  auto dt = toXcclType(op, out.scalar_type());
  return launch({.name = op,
                 .type = c10d::OpType::_REDUCE_SCATTER_BASE,
                 .inputs = input,
                 .timeout = opts.timeout,
                 .outputs = {output},
                 .keepAlive = {send, out},
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclReduceScatter(send.data_ptr(), out.data_ptr(), out.numel(), dt,
                                                xop, tg.comm, tg.stream);
                     },
                 .extra = blockingCall(opts)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size(), "xccl ", op, ": ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  std::vector<at::Tensor> sends, outs, keep;
  std::vector<xcclRedOp_t> xops;
  CopyBack cb;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(op, inputs[i], "input");
    checkTensor(op, outputs[i], "output");
    checkSame(op, inputs[i], outputs[i]);
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * getSize(), "xccl ", op, ": input ", i,
                " must have world_size * output elements (", outputs[i].numel() * getSize(),
                "), got ", inputs[i].numel());
    auto xop = toXcclOp(op, opts.reduceOp, inputs[i].scalar_type());
    sends.push_back(reduceScatterSend(op, inputs[i], opts.reduceOp, xop));
    xops.push_back(xop);
    outs.push_back(contig(outputs[i]));
    cb.add(outputs[i], outs.back());
  }
  keep = sends;
  keep.insert(keep.end(), outs.begin(), outs.end());
  return launch({.name = op,
                 .type = c10d::OpType::COALESCED,
                 .inputs = inputs,
                 .timeout = opts.timeout,
                 .outputs = outputs,
                 .keepAlive = keep,
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return grouped([&] {
                         for (size_t i = 0; i < sends.size(); ++i) {
                           auto r = xcclReduceScatter(
                               sends[i].data_ptr(), outs[i].data_ptr(), outs[i].numel(),
                               toXcclType(op, outs[i].scalar_type()), xops[i], tg.comm, tg.stream);
                           if (r != xcclSuccess) return r;
                         }
                         return xcclSuccess;
                       });
                     },
                 .extra = blockingCall(opts)});
}

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

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                      int tag) {
  const char* op = "send";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, dstRank, getSize(), "destination rank");
  TORCH_CHECK(dstRank != getRank(), "xccl ", op, ": cannot send to self (rank ", dstRank, ")");
  at::Tensor buf = contig(t);
  auto dt = toXcclType(op, t.scalar_type());
  // Tags are not part of libxccl's matching: messages between two ranks match in order.
  return launch({.name = op,
                 .type = c10d::OpType::SEND,
                 .inputs = t,
                 .timeout = kNoTimeout,
                 .outputs = {t},
                 .keepAlive = {buf},
                 .enqueue = [&](const Target& tg) {
                   return xcclSend(buf.data_ptr(), buf.numel(), dt, dstRank, tg.comm, tg.stream);
                 }});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                      int tag) {
  const char* op = "recv";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, srcRank, getSize(), "source rank");
  TORCH_CHECK(srcRank != getRank(), "xccl ", op, ": cannot receive from self (rank ", srcRank, ")");
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  return launch({.name = op,
                 .type = c10d::OpType::RECV,
                 .inputs = {},
                 .timeout = kNoTimeout,
                 .outputs = {t},
                 .keepAlive = {buf},
                 .post = cb.fn(),
                 .enqueue = [&](const Target& tg) {
                   return xcclRecv(buf.data_ptr(), buf.numel(), dt, srcRank, tg.comm, tg.stream);
                 }});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  const char* op = "recvAnysource";
  const at::Tensor& t = single(op, tensors);
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  int* peer = nullptr;
  LaunchExtra extra;
  extra.peerSlot = &peer;
  return launch({.name = op,
                 .type = c10d::OpType::RECVANYSOURCE,
                 .inputs = {},
                 .timeout = kNoTimeout,
                 .outputs = {t},
                 .keepAlive = {buf},
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclRecvAny(buf.data_ptr(), buf.numel(), dt, peer, tg.comm,
                                          tg.stream);
                     },
                 .extra = extra});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::barrier(const c10d::BarrierOptions& opts) {
  // The device, as ProcessGroupNCCL picks it (torch's dispatcher passes device_ids, not the
  // device): the first of device_ids, else the bound device, else the device the group
  // already uses. There the barrier is ordered after the group's device operations and its
  // wait() blocks the host until it is done; with none of them, the host communicator.
  LaunchExtra extra;
  auto bound = getBoundDeviceId();
  std::optional<c10::Device> inUse;
  {
    std::lock_guard<std::mutex> g(devMu_);
    if (devComm_) inUse = devComm_->device;
  }
  if (opts.device && isAccelerator(*opts.device)) {
    extra.device = opts.device;
  } else if (!opts.device_ids.empty()) {
    // device_ids name indices: of the bound device's type, else the one in use, else CUDA
    // where torch has it (as ProcessGroupNCCL), else xdev.
    c10::DeviceType type = bound && isAccelerator(*bound) ? bound->type()
                           : inUse                        ? inUse->type()
                           : at::hasCUDA()                ? c10::DeviceType::CUDA
                                                          : c10::DeviceType::PrivateUse1;
    extra.device = c10::Device(type, static_cast<c10::DeviceIndex>(opts.device_ids[0]));
  } else if (bound && isAccelerator(*bound)) {
    extra.device = bound;
  } else {
    extra.device = inUse;
  }
  extra.callerWaits = !opts.asyncOp;
  return launch({.name = "barrier",
                 .type = c10d::OpType::BARRIER,
                 .timeout = opts.timeout,
                 .enqueue = [&](const Target& tg) { return xcclBarrier(tg.comm, tg.stream); },
                 .extra = extra});
}

void ProcessGroupXCCL::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  // Store-based, like Gloo's: every rank checks in; rank 0 waits for each one (so it can name
  // the ranks that did not arrive), then releases the others.
  const char* op = "monitored_barrier";
  auto timeout = opTimeout(opts.timeout);
  uint64_t id = ++barrierCount_;
  std::string base = "xccl_mbarrier/" + std::to_string(id) + "/";
  int rank = getRank(), size = getSize();
  if (rank != 0) {
    store_->set(base + std::to_string(rank), std::vector<uint8_t>{1});
    try {
      store_->wait({base + "release"}, timeout);
    } catch (const std::exception& e) {
      throwDist(std::string("xccl ") + op + ": rank " + std::to_string(rank) +
                " was not released by rank 0 within " + std::to_string(timeout.count()) +
                " ms: " + e.what());
    }
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size; ++r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      store_->wait({base + std::to_string(r)}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      missing.push_back(r);
      if (!waitAllRanks) break;
    }
  }
  if (!missing.empty()) {
    std::ostringstream os;
    os << "xccl " << op << ": rank(s) ";
    for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i];
    os << " failed to pass monitoredBarrier in " << timeout.count() << " ms";
    throwDist(os.str());
  }
  store_->set(base + "release", std::vector<uint8_t>{1});
}

}  // namespace torch_xccl
