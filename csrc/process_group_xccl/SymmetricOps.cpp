// SymmetricOps.cpp — torch.ops.symm_mem on xdev (PrivateUse1): the one-shot and two-shot
// allreduces over symmetric memory (and the multimem ops, which give their results: xdev has
// no multicast), reduce_scatter_out, the 32-bit stores torch's fused ops signal with, and
// the helpers every symm_mem kernel here shares (SymmetricOps.hpp).
//
// torch defines these ops' schemas (and meta kernels) and registers kernels for CUDA only;
// these are the xdev kernels. Each runs on the current xdev stream as one host function:
//   reduce_scatter_out: barrier; rank r folds chunk r of every rank's buffer; barrier.
//   one_shot: barrier; every rank folds all ranks' buffers into its output; barrier (so no
//             rank changes its buffer while a peer still reads it).
//   two_shot: barrier; rank r folds slice r of every rank's buffer and writes the result
//             into slice r of every buffer; barrier (in place), or for _out: the result goes
//             to its own slice r, barrier, every rank copies the slices into its output,
//             barrier.
// Folds run in rank order, ((b0 op b1) op b2)..., so every rank gets the same bits, and
// one_shot and two_shot agree. Ops: sum, avg, max, min (CUDA's take sum, some avg).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "SymmetricMemory.hpp"
#include "SymmetricOps.hpp"
#include "Utils.hpp"
#include "xdev_runtime.h"

namespace torch_xccl {

SymmFold symmFoldOf(const char* name, const at::Tensor& t, const std::string& op) {
  SymmFold f{static_cast<xdevDataType_t>(toXcclType(name, t.scalar_type())), xdevSum, false};
  if (op == "sum") {
  } else if (op == "avg") {
    TORCH_CHECK(at::isFloatingType(t.scalar_type()), "symm_mem.", name,
                ": reduce_op \"avg\" needs a floating dtype, got ", t.scalar_type());
    f.average = true;
  } else if (op == "max") {
    f.op = xdevMax;
  } else if (op == "min") {
    f.op = xdevMin;
  } else {
    TORCH_CHECK(false, "symm_mem.", name, " (xdev): reduce_op \"", op,
                "\" is not supported (sum, avg, max, min)");
  }
  return f;
}

void symmOk(xdevError_t e, const char* what) {
  if (e != xdevSuccess) {
    throw std::runtime_error(std::string("symm_mem (xdev): ") + what + ": " +
                             xdevGetLastErrorMessage());
  }
}

// dst = ((src[0] op src[1]) op src[2]) ... in rank order, count elements (on the stream
// worker), in one pass over the sources (xdevReduceCopy: block by block, each block of every
// source read before that block of dst is written, so dst may be one of the sources).
void symmFoldInto(char* dst, const std::vector<const char*>& src, size_t count, size_t /*elem*/,
                  const SymmFold& f) {
  if (count == 0) return;
  void* to[1] = {dst};
  symmOk(xdevReduceCopy(to, 1, reinterpret_cast<const void* const*>(src.data()),
                        static_cast<int>(src.size()), count, f.dtype, f.op),
         "fold");
  if (f.average) {
    symmOk(xdevDivide(dst, count, f.dtype, static_cast<int64_t>(src.size())), "average");
  }
}

// The tensor's place in its symmetric buffer, checked: contiguous, inside the buffer, and
// every rank of the group reachable (one host).
size_t symmPlace(const char* name, XdevSymmetricMemory& m, const at::Tensor& t) {
  TORCH_CHECK(t.is_contiguous(), "symm_mem.", name, " (xdev): the input must be contiguous");
  TORCH_CHECK(m.world_within_direct_access(), "symm_mem.", name, " (xdev): group ", m.group(),
              " spans hosts; these ops read every rank's buffer in place");
  const auto off = static_cast<const char*>(t.data_ptr()) - m.bufferOf(m.get_rank());
  TORCH_CHECK(off >= 0 && static_cast<size_t>(off) + t.nbytes() <= m.get_buffer_size(), "symm_mem.",
              name, " (xdev): the input lies outside its symmetric buffer");
  return static_cast<size_t>(off);
}

void symmCheckOut(const char* name, const at::Tensor& in, const at::Tensor& out) {
  TORCH_CHECK(out.is_contiguous() && out.device() == in.device() &&
                  out.scalar_type() == in.scalar_type() && out.numel() == in.numel(),
              "symm_mem.", name, " (xdev): out must be a contiguous ", in.scalar_type(),
              " tensor of ", in.numel(), " elements on ", in.device());
}

std::vector<const char*> symmSources(XdevSymmetricMemory& m, size_t byteOffset) {
  std::vector<const char*> src;
  for (int r = 0; r < m.get_world_size(); ++r) src.push_back(m.bufferOf(r) + byteOffset);
  return src;
}

// Whether [p, p + bytes) meets any rank's symmetric buffer of m.
// Rank r's slice of count elements: [lo, hi).
std::pair<size_t, size_t> symmSlice(size_t count, int world, int r) {
  const size_t per = (count + world - 1) / world;
  const size_t lo = std::min(count, per * r);
  return {lo, std::min(count, lo + per)};
}

bool insideAnyBuffer(XdevSymmetricMemory& m, const char* p, size_t bytes) {
  for (int r = 0; r < m.get_world_size(); ++r) {
    const char* b = m.bufferOf(r);
    if (p + bytes > b && p < b + m.get_buffer_size()) return true;
  }
  return false;
}

void symmTakePart(const c10::intrusive_ptr<XdevSymmetricMemory>& m) {
  m->enqueue([m] {
    m->barrierNow(0, 0);
    m->barrierNow(0, 0);
  });
}

namespace {

// Every rank's (root < 0) or the root's out = the fold of every rank's input.
at::Tensor oneShotTo(const char* name, const at::Tensor& input, const std::string& reduceOp,
                     const std::string& groupName, at::Tensor out, int64_t root) {
  auto m = symmetricMemoryOf(input, groupName);
  const size_t at = symmPlace(name, *m, input);
  symmCheckOut(name, input, out);
  const SymmFold f = symmFoldOf(name, input, reduceOp);
  TORCH_CHECK(root < m->get_world_size(), "symm_mem.", name, " (xdev): root ", root,
              " is not a rank of group ", groupName, " (", m->get_world_size(), " ranks)");
  if (root >= 0 && root != m->get_rank()) {
    symmTakePart(m);
    return out;
  }
  const size_t count = input.numel(), elem = input.element_size();
  char* dst = static_cast<char*>(out.data_ptr());
  // An out inside any rank's buffer (its own, or a peer's through get_buffer) would change
  // what the others are reading: fold aside.
  const bool aside = insideAnyBuffer(*m, dst, count * elem);
  m->enqueue([m, at, count, elem, f, dst, aside] {
    m->barrierNow(0, 0);
    std::vector<char> scratch(aside ? count * elem : 0);
    symmFoldInto(aside ? scratch.data() : dst, symmSources(*m, at), count, elem, f);
    m->barrierNow(0, 0);
    if (aside) std::memcpy(dst, scratch.data(), scratch.size());
  });
  return out;
}

at::Tensor oneShotOut(const at::Tensor& input, std::string reduceOp, std::string groupName,
                      at::Tensor out) {
  return oneShotTo("one_shot_all_reduce", input, reduceOp, groupName, out, -1);
}

// xdev has no multicast: the multimem ops give the results of one-shot and two-shot.
at::Tensor multimemOneShotOut(const at::Tensor& input, std::string reduceOp, std::string groupName,
                              at::Tensor out) {
  return oneShotTo("multimem_one_shot_all_reduce", input, reduceOp, groupName, out, -1);
}

at::Tensor multimemOneShot(const at::Tensor& input, std::string reduceOp, std::string groupName) {
  return multimemOneShotOut(input, reduceOp, groupName, at::empty_like(input));
}

at::Tensor multimemReduceOut(const at::Tensor& input, std::string reduceOp, int64_t root,
                             std::string groupName, at::Tensor out) {
  TORCH_CHECK(root >= 0, "symm_mem.multimem_one_shot_reduce_out (xdev): root ", root, " < 0");
  return oneShotTo("multimem_one_shot_reduce_out", input, reduceOp, groupName, out, root);
}

at::Tensor oneShot(const at::Tensor& input, std::string reduceOp, std::string groupName) {
  return oneShotOut(input, reduceOp, groupName, at::empty_like(input));
}

at::Tensor oneShotCopyOut(const at::Tensor& symmBuffer, const at::Tensor& localInput,
                          std::string reduceOp, std::string groupName, at::Tensor out) {
  TORCH_CHECK(localInput.numel() <= symmBuffer.numel(),
              "symm_mem.one_shot_all_reduce_copy (xdev): local_input has ", localInput.numel(),
              " elements, the symmetric buffer ", symmBuffer.numel());
  at::Tensor slot = symmBuffer.flatten().narrow(0, 0, localInput.numel()).view_as(localInput);
  slot.copy_(localInput);  // on the current stream, before the op's host function
  return oneShotOut(slot, reduceOp, groupName, out);
}

at::Tensor oneShotCopy(const at::Tensor& symmBuffer, const at::Tensor& localInput,
                       std::string reduceOp, std::string groupName) {
  return oneShotCopyOut(symmBuffer, localInput, reduceOp, groupName, at::empty_like(localInput));
}

void twoShot(XdevSymmetricMemory& m, const at::Tensor& input, const std::string& reduceOp,
             char* out) {
  const char* name = "two_shot_all_reduce";
  auto self = c10::intrusive_ptr<XdevSymmetricMemory>::reclaim_copy(&m);
  const size_t at = symmPlace(name, m, input);
  const SymmFold f = symmFoldOf(name, input, reduceOp);
  const size_t count = input.numel(), elem = input.element_size();
  self->enqueue([self, at, count, elem, f, out] {
    const int world = self->get_world_size(), me = self->get_rank();
    self->barrierNow(0, 0);
    const auto [lo, hi] = symmSlice(count, world, me);
    // Only this rank reads slice `me` of any buffer until the next barrier, so the fold goes
    // straight into its own buffer's slice (element by element, each read before it is
    // written), then out to the peers' (in place) or stays for them to copy (_out).
    char* mine = self->bufferOf(me) + at + lo * elem;
    const std::vector<const char*> src = symmSources(*self, at + lo * elem);
    if (out == nullptr && !f.average && hi > lo) {
      // In place: each block of the fold stored into every rank's buffer while it is in the
      // cache (one read and one write of the slice per buffer; the fold into this rank's
      // slice and then copies to the peers' read it once more).
      std::vector<void*> to(world);
      for (int r = 0; r < world; ++r) to[r] = self->bufferOf((me + 1 + r) % world) + at + lo * elem;
      symmOk(xdevReduceCopy(to.data(), world, reinterpret_cast<const void* const*>(src.data()),
                            world, hi - lo, f.dtype, f.op),
             "fold");
    } else {
      symmFoldInto(mine, src, hi - lo, elem, f);
      for (int r = 0; r < world && out == nullptr; ++r) {
        if (r != me) std::memcpy(self->bufferOf(r) + at + lo * elem, mine, (hi - lo) * elem);
      }
    }
    self->barrierNow(0, 0);
    if (out == nullptr) return;
    for (int r = 0; r < world; ++r) {
      const auto [a, b] = symmSlice(count, world, r);
      std::memcpy(out + a * elem, self->bufferOf(r) + at + a * elem, (b - a) * elem);
    }
    self->barrierNow(0, 0);
  });
}

at::Tensor twoShotInPlace(at::Tensor input, std::string reduceOp, std::string groupName) {
  auto m = symmetricMemoryOf(input, groupName);
  twoShot(*m, input, reduceOp, nullptr);
  return input;
}

at::Tensor multimemAllReduce(at::Tensor input, std::string reduceOp, std::string groupName) {
  return twoShotInPlace(input, reduceOp, groupName);
}

at::Tensor twoShotOut(at::Tensor input, std::string reduceOp, std::string groupName,
                      at::Tensor output) {
  auto m = symmetricMemoryOf(input, groupName);
  symmCheckOut("two_shot_all_reduce_out", input, output);
  twoShot(*m, input, reduceOp, static_cast<char*>(output.data_ptr()));
  return output;
}

// Rank r's share of the sum of every rank's buffer: chunk r along dim 0 (rows), or along the
// last dim (split_last_dim: chunk r of every row), as torch's CUDA kernel splits it.
at::Tensor reduceScatterOut(at::Tensor input, std::string groupName, bool splitLastDim,
                            at::Tensor output) {
  const char* name = "reduce_scatter_out";
  auto m = symmetricMemoryOf(input, groupName);
  const size_t at = symmPlace(name, *m, input);
  const int world = m->get_world_size();
  TORCH_CHECK(input.dim() >= 1, "symm_mem.", name, " (xdev): the input has no dimensions");
  const int64_t split = splitLastDim ? input.size(-1) : input.size(0);
  TORCH_CHECK(split % world == 0, "symm_mem.", name,
              " (xdev): ", splitLastDim ? "the last" : "the first", " dimension (", split,
              ") does not divide by the group's ", world, " ranks");
  TORCH_CHECK(output.is_contiguous() && output.scalar_type() == input.scalar_type() &&
                  output.device() == input.device() && output.numel() * world == input.numel(),
              "symm_mem.", name, " (xdev): output must be a contiguous ", input.scalar_type(),
              " tensor of ", input.numel() / world, " elements on ", input.device());
  const SymmFold f = symmFoldOf(name, input, "sum");
  const size_t elem = input.element_size();
  // rows x cols, of which each rank takes `cols / world` columns (dim 0: one row).
  const size_t cols = splitLastDim ? static_cast<size_t>(split) : input.numel();
  const size_t rows = input.numel() / cols;
  const size_t part = cols / world;
  char* out = static_cast<char*>(output.data_ptr());
  m->enqueue([m, at, elem, f, rows, cols, part, out] {
    const int me = m->get_rank();
    m->barrierNow(0, 0);
    for (size_t i = 0; i < rows; ++i) {
      symmFoldInto(out + i * part * elem, symmSources(*m, at + (i * cols + me * part) * elem), part,
                   elem, f);
    }
    m->barrierNow(0, 0);
  });
  return output;
}

// 32-bit stores at uint32 offsets of a tensor, on the current stream (the signals of torch's
// fused all-gather-matmul).
void symmStore32(const char* name, at::Tensor& t, int64_t offset, int64_t val, int64_t count) {
  TORCH_CHECK(t.scalar_type() == at::kUInt32 || t.scalar_type() == at::kInt, "symm_mem.", name,
              " (xdev): the tensor must be uint32 or int32, got ", t.scalar_type());
  TORCH_CHECK(offset >= 0 && count >= 0 && offset + count <= t.numel(), "symm_mem.", name,
              " (xdev): [", offset, ", +", count, ") lies outside ", t.numel(), " elements");
  TORCH_CHECK(val >= 0 && val <= UINT32_MAX, "symm_mem.", name, " (xdev): ", val,
              " does not fit 32 bits");
  auto* p = static_cast<uint32_t*>(t.data_ptr()) + offset;
  const auto v = static_cast<uint32_t>(val);
  enqueueOnCurrentStream(t.device(), [p, v, count] {
    for (int64_t i = 0; i < count; ++i) __atomic_store_n(p + i, v, __ATOMIC_RELEASE);
  });
}

at::Tensor memset32(at::Tensor& input, int64_t offset, int64_t val, int64_t count) {
  symmStore32("memset32_", input, offset, val, count);
  return input;
}

at::Tensor streamWriteValue32(at::Tensor& input, int64_t offset, int64_t val) {
  symmStore32("stream_write_value32_", input, offset, val, 1);
  return input;
}

[[maybe_unused]] const bool kSymmOpsRegistered = [] {
  static torch::Library lib(torch::Library::IMPL, "symm_mem", c10::DispatchKey::PrivateUse1,
                            __FILE__, __LINE__);
  symmImpl(lib, "one_shot_all_reduce", oneShot);
  symmImpl(lib, "one_shot_all_reduce_out", oneShotOut);
  symmImpl(lib, "one_shot_all_reduce_copy", oneShotCopy);
  symmImpl(lib, "one_shot_all_reduce_copy_out", oneShotCopyOut);
  symmImpl(lib, "two_shot_all_reduce_", twoShotInPlace);
  symmImpl(lib, "two_shot_all_reduce_out", twoShotOut);
  symmImpl(lib, "reduce_scatter_out", reduceScatterOut);
  symmImpl(lib, "multimem_all_reduce_", multimemAllReduce);
  symmImpl(lib, "multimem_one_shot_all_reduce", multimemOneShot);
  symmImpl(lib, "multimem_one_shot_all_reduce_out", multimemOneShotOut);
  symmImpl(lib, "multimem_one_shot_reduce_out", multimemReduceOut);
  symmImpl(lib, "memset32_", memset32);
  symmImpl(lib, "stream_write_value32_", streamWriteValue32);
  return true;
}();

}  // namespace
}  // namespace torch_xccl
