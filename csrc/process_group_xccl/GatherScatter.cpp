// GatherScatter.cpp — the c10d collectives that move data without reducing it, to or from
// every rank: broadcast, allgather (list, tensor and coalesced forms), gather and scatter.
// Check the arguments, stage contiguous / flat buffers, enqueue through launch().
#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

namespace {
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
}  // namespace

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
                 .extra = rootedCall(opts)});
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
  if (checkUnevenList(op, outputs[0], in0, getSize(), getRank(), "the output list")) {
    return allgatherUneven(outputs[0], in0, opts);
  }
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

// all_gather with outputs of different sizes (rank i's tensor has outputs[i]'s numel):
// xcclAllGatherv into one flat buffer, then each output copied out of its slice.
c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::allgatherUneven(
    std::vector<at::Tensor>& outs, const at::Tensor& in0, const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  at::Tensor in = contig(in0);
  std::vector<size_t> counts, displs;
  size_t total = 0;
  countsAndDispls(outs, &counts, &displs, &total);
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, in.options());
  auto dt = toXcclType(op, in.scalar_type());
  std::function<void()> post = [outs, flat, counts, displs]() {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flat.narrow(0, static_cast<int64_t>(displs[i]), static_cast<int64_t>(counts[i]))
                        .view(outs[i].sizes()));
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
                       return xcclAllGatherv(in.data_ptr(), counts[getRank()], flat.data_ptr(),
                                             counts.data(), displs.data(), dt, tg.comm, tg.stream);
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

}  // namespace torch_xccl
