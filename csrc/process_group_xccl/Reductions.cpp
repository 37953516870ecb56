// Reductions.cpp — the c10d collectives that reduce: allreduce, reduce, reduce_scatter
// (list and tensor forms) and their coalesced forms, which share the PREMUL_SUM handling
// with them. Check the arguments, stage contiguous buffers, enqueue through launch().
#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

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

// reduce / reduce_scatter have no premul variant: scale a copy, then SUM.
at::Tensor premulScaled(const char* op, const at::Tensor& input, const c10d::ReduceOp& rop) {
  at::Tensor f = premulFactor(op, rop, input.scalar_type());
  return (input.contiguous() * f.to(input.device())).contiguous();
}

// Input of a reduce-scatter, with PREMUL_SUM folded into a scaled copy.
at::Tensor reduceScatterSend(const char* op, const at::Tensor& in, const c10d::ReduceOp& rop,
                             xcclRedOp_t& xop) {
  if (xop == xcclPremulSum) {
    xop = xcclSum;
    return premulScaled(op, in, rop);
  }
  return contig(in);
}

// One reduce-scatter enqueue: `send` holds world_size * out.numel() elements.
xcclResult_t enqueueReduceScatter(const at::Tensor& send, const at::Tensor& out, xcclDataType_t dt,
                                  xcclRedOp_t xop, const Target& tg) {
  return xcclReduceScatter(send.data_ptr(), out.data_ptr(), out.numel(), dt, xop, tg.comm,
                           tg.stream);
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  constexpr const char* op = "allreduce";  // a constant: the enqueue needs no capture of it
  const at::Tensor& t = single(op, tensors);
  TORCH_CHECK(!opts.sparseIndices.has_value(), "xccl ", op, ": sparse allreduce is not supported");
  // The per-call path of the commonest collective (DDP's buckets, small blocking calls):
  // nothing here allocates that need not. The staging buffer and the PREMUL_SUM factor are
  // kept alive only when they are not the output itself (with a factor both are, as the
  // desync report describes them), and the enqueue captures one reference, which
  // std::function holds without a heap block.
  struct Args {
    at::Tensor buf;
    xcclRedOp_t xop;
    at::Tensor factor;
  } a{contig(t), toXcclOp(op, opts.reduceOp, t.scalar_type()), {}};
  CopyBack cb;
  cb.add(t, a.buf);
  std::vector<at::Tensor> keep;
  if (!a.buf.is_same(t) || a.xop == xcclPremulSum) keep.push_back(a.buf);
  if (a.xop == xcclPremulSum) {
    a.factor = premulFactor(op, opts.reduceOp, t.scalar_type());
    keep.push_back(a.factor);
  }
  return launch(
      {.name = op,
       .type = c10d::OpType::ALLREDUCE,
       .inputs = t,
       .timeout = opts.timeout,
       .outputs = {t},
       .keepAlive = std::move(keep),
       .post = cb.fn(),
       .enqueue =
           [&a](const Target& tg) { return enqueueAllreduce(op, a.buf, a.xop, a.factor, tg); },
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

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  const at::Tensor& out0 = single(op, outputs, "output tensor");
  TORCH_CHECK(inputs.size() == 1, "xccl ", op, ": expected one input list, got ", inputs.size());
  const bool uneven = checkUnevenList(op, inputs[0], out0, getSize(), getRank(), "the input list");
  auto xop = toXcclOp(op, opts.reduceOp, out0.scalar_type());
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
  at::Tensor send = reduceScatterSend(op, at::cat(parts), opts.reduceOp, xop);
  at::Tensor out = contig(out0);
  CopyBack cb;
  cb.add(out0, out);
  auto dt = toXcclType(op, out.scalar_type());
  // Inputs of different sizes: block i (input i's numel) goes to rank i.
  std::vector<size_t> counts, displs;
  size_t total = 0;
  if (uneven) countsAndDispls(inputs[0], &counts, &displs, &total);
  return launch({.name = op,
                 .type = c10d::OpType::REDUCE_SCATTER,
                 .inputs = inputs[0],
                 .timeout = opts.timeout,
                 .outputs = {out0},
                 .keepAlive = {send, out},
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       if (!uneven) return enqueueReduceScatter(send, out, dt, xop, tg);
                       return xcclReduceScatterv(send.data_ptr(), out.data_ptr(), counts.data(),
                                                 displs.data(), dt, xop, tg.comm, tg.stream);
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
  return launch(
      {.name = op,
       .type = c10d::OpType::_REDUCE_SCATTER_BASE,
       .inputs = input,
       .timeout = opts.timeout,
       .outputs = {output},
       .keepAlive = {send, out},
       .post = cb.fn(),
       .enqueue = [&](const Target& tg) { return enqueueReduceScatter(send, out, dt, xop, tg); },
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
                           auto r = enqueueReduceScatter(sends[i], outs[i],
                                                         toXcclType(op, outs[i].scalar_type()),
                                                         xops[i], tg);
                           if (r != xcclSuccess) return r;
                         }
                         return xcclSuccess;
                       });
                     },
                 .extra = blockingCall(opts)});
}

}  // namespace torch_xccl
