// SymmetricOps.hpp — what the xdev kernels of torch.ops.symm_mem share (SymmetricOps.cpp
// defines them; SymmetricCollectives.cpp uses them): the fold of every rank's buffer in rank
// order, the checks of where a tensor lies in its symmetric buffer, and the registration of
// one kernel at a time.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstddef>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "SymmetricMemory.hpp"
#include "xdev_runtime.h"

namespace torch_xccl {

// How to fold: xdev's dtype and op; `average` divides the sum by the number of ranks.
struct SymmFold {
  xdevDataType_t dtype;
  xdevRedOp_t op;
  bool average;
};

// reduce_op "sum", "avg" (floating dtypes), "max", "min"; anything else is refused naming `name`.
SymmFold symmFoldOf(const char* name, const at::Tensor& t, const std::string& op);
// On the stream worker: throws a plain exception (the stream's error) when e failed.
void symmOk(xdevError_t e, const char* what);
// dst = src[0] op src[1] op ... in rank order, count elements of `elem` bytes; dst may be one
// of the sources. On the stream worker.
void symmFoldInto(char* dst, const std::vector<const char*>& src, size_t count, size_t elem,
                  const SymmFold& f);
// The byte offset of contiguous t in its symmetric buffer, checked (inside, one host).
size_t symmPlace(const char* name, XdevSymmetricMemory& m, const at::Tensor& t);
// out: contiguous, in's dtype, device and number of elements.
void symmCheckOut(const char* name, const at::Tensor& in, const at::Tensor& out);
// Every rank's buffer at byteOffset, by rank.
std::vector<const char*> symmSources(XdevSymmetricMemory& m, size_t byteOffset);
// Rank r's slice [lo, hi) of count elements split over world ranks.
std::pair<size_t, size_t> symmSlice(size_t count, int world, int r);
// Whether [p, p + bytes) meets any rank's symmetric buffer of m (an output there must not be
// written while peers read).
bool insideAnyBuffer(XdevSymmetricMemory& m, const char* p, size_t bytes);

// A rank with nothing of its own in an op: its two barriers, on the current stream, so that no
// rank changes its buffer while a peer still reads it.
void symmTakePart(const c10::intrusive_ptr<XdevSymmetricMemory>& m);

// Registered when the extension loads, one op at a time: torch checks each kernel's C++
// signature against the other backends' kernels of the op (CUDA's, in a CUDA build), and a
// release whose signature differs must cost that op on xdev, not the import of torch_xccl.
template <typename F>
void symmImpl(torch::Library& lib, const char* op, F* fn) {
  try {
    lib.impl(op, fn);
  } catch (const std::exception& e) {
    TORCH_WARN("torch_xccl: symm_mem.", op,
               " is not available on xdev with this torch: ", e.what());
  }
}

}  // namespace torch_xccl
