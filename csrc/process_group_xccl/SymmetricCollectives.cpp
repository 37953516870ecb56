// SymmetricCollectives.cpp — more of torch.ops.symm_mem on xdev (PrivateUse1), the ops torch
// registers for CUDA through NVSHMEM or multicast (NVLS), here as host functions on the
// current xdev stream over the ranks' mapped symmetric buffers:
//   tile_reduce: barrier; the root folds every rank's 2-D tile (any strides) into its
//             out_tile; barrier. multi_root_tile_reduce: tile k to roots[k], all at once.
//   multimem_*: xdev has no multicast; the same results as one-shot / two-shot (and an
//             all-gather that copies every rank's input), so code written for NVLS runs.
//   all_to_all_vdev (and _2d, _2d_offset, MoE's dispatch and combine): splits on the
//             device; each rank pulls its rows from every peer's input between two
//             barriers and writes its received splits and their offsets.
//   get_remote_tensors: every rank's tensor at the same place of its buffer.
// Folds run in rank order, as SymmetricOps.cpp's, so every rank gets the same bits.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "SymmetricMemory.hpp"
#include "SymmetricOps.hpp"
#include "xdev_runtime.h"

namespace torch_xccl {
namespace {

// A 2-D view: rows x cols elements, element (i, j) at (i * s0 + j * s1) elements from its start.
struct Tile {
  size_t rows, cols, s0, s1;
};

// Bytes from a tile's first element to the end of its last.
size_t tileBytes(const Tile& g, size_t elem) {
  return g.rows == 0 || g.cols == 0 ? 0 : ((g.rows - 1) * g.s0 + (g.cols - 1) * g.s1 + 1) * elem;
}

Tile tileOf(const char* name, const char* what, const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 2, "symm_mem.", name, " (xdev): ", what, " must be 2-D, got ", t.dim(),
              " dimensions");
  TORCH_CHECK(t.stride(0) >= 0 && t.stride(1) >= 0, "symm_mem.", name, " (xdev): ", what,
              " has a negative stride");
  return {static_cast<size_t>(t.size(0)), static_cast<size_t>(t.size(1)),
          static_cast<size_t>(t.stride(0)), static_cast<size_t>(t.stride(1))};
}

// Byte offset of a tile in its symmetric buffer, checked: every element inside the buffer.
size_t tilePlace(const char* name, XdevSymmetricMemory& m, const at::Tensor& t, const Tile& g) {
  TORCH_CHECK(m.world_within_direct_access(), "symm_mem.", name, " (xdev): group ", m.group(),
              " spans hosts; these ops read every rank's buffer in place");
  const auto off = static_cast<const char*>(t.data_ptr()) - m.bufferOf(m.get_rank());
  TORCH_CHECK(
      off >= 0 && static_cast<size_t>(off) + tileBytes(g, t.element_size()) <= m.get_buffer_size(),
      "symm_mem.", name, " (xdev): the input tile lies outside its symmetric buffer");
  return static_cast<size_t>(off);
}

// On the root's stream worker: out = the fold, in rank order, of every rank's tile at byte
// `at` of its buffer of `src` (shape and strides `in`); out's own strides `outTile`. Between
// the two barriers around it no rank changes its tile; an out inside any rank's buffer (or
// strided) is written from a contiguous fold after the second barrier.
void tileFold(XdevSymmetricMemory& src, size_t at, const Tile& in, char* out, const Tile& outTile,
              size_t elem, const SymmFold& f, bool aside, XdevSymmetricMemory& sync) {
  const size_t world = static_cast<size_t>(src.get_world_size());
  sync.barrierNow(0, 0);
  const bool direct = !aside && outTile.s1 == 1;
  std::vector<char> scratch(direct ? 0 : in.rows * in.cols * elem);
  std::vector<std::vector<char>> gathered(in.s1 == 1 ? 0 : world);
  for (size_t i = 0; i < in.rows; ++i) {
    std::vector<const char*> rows = symmSources(src, at + i * in.s0 * elem);
    if (in.s1 != 1) {  // a strided row: each rank's elements side by side first
      for (size_t r = 0; r < world; ++r) {
        gathered[r].resize(in.cols * elem);
        for (size_t j = 0; j < in.cols; ++j) {
          std::memcpy(gathered[r].data() + j * elem, rows[r] + j * in.s1 * elem, elem);
        }
        rows[r] = gathered[r].data();
      }
    }
    char* dst = direct ? out + i * outTile.s0 * elem : scratch.data() + i * in.cols * elem;
    symmFoldInto(dst, rows, in.cols, elem, f);
  }
  sync.barrierNow(0, 0);
  if (direct) return;
  for (size_t i = 0; i < in.rows; ++i) {
    for (size_t j = 0; j < in.cols; ++j) {
      std::memcpy(out + (i * outTile.s0 + j * outTile.s1) * elem,
                  scratch.data() + (i * in.cols + j) * elem, elem);
    }
  }
}

void checkTileOut(const char* name, const at::Tensor& in, const at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == in.scalar_type() && out.device() == in.device() &&
                  out.sizes() == in.sizes(),
              "symm_mem.", name, " (xdev): out_tile must be a ", in.scalar_type(), " tile of ",
              in.sizes(), " on ", in.device(), ", got ", out.scalar_type(), " ", out.sizes(),
              " on ", out.device());
}

// Tile k of every rank (a 2-D view, any strides, of its symmetric buffer) folds into
// roots[k]'s out_tile; a rank is the root of one tile at most; every rank takes part (one
// pair of barriers). tile_reduce is the one-tile case; the other ranks' out_tile is untouched.
void reduceTiles(const char* name, at::TensorList inTiles, at::Tensor& outTile,
                 at::IntArrayRef roots, const std::string& groupName, const std::string& reduceOp) {
  TORCH_CHECK(!inTiles.empty(), "symm_mem.", name, " (xdev): no tiles");
  TORCH_CHECK(roots.size() == inTiles.size(), "symm_mem.", name, " (xdev): ", inTiles.size(),
              " tiles but ", roots.size(), " roots");
  std::vector<c10::intrusive_ptr<XdevSymmetricMemory>> mems;
  for (const at::Tensor& t : inTiles) {
    tileOf(name, "in_tile", t);
    checkTileOut(name, t, outTile);
    mems.push_back(symmetricMemoryOf(t, groupName));
  }
  const Tile out = tileOf(name, "out_tile", outTile);
  const int world = mems[0]->get_world_size(), me = mems[0]->get_rank();
  int mine = -1;
  for (size_t k = 0; k < inTiles.size(); ++k) {
    TORCH_CHECK(roots[k] >= 0 && roots[k] < world, "symm_mem.", name, " (xdev): root ", roots[k],
                " is not a rank of group ", groupName, " (", world, " ranks)");
    if (roots[k] != me) continue;
    TORCH_CHECK(mine < 0, "symm_mem.", name, " (xdev): rank ", me, " is the root of tiles ", mine,
                " and ", k, " (a rank is the root of one tile at most)");
    mine = static_cast<int>(k);
  }
  auto sync = mems[0];  // every rank's barriers on one buffer's signal pad
  if (mine < 0) {
    symmTakePart(sync);
    return;
  }
  auto m = mems[mine];
  const Tile in = tileOf(name, "in_tile", inTiles[mine]);
  const size_t at = tilePlace(name, *m, inTiles[mine], in);
  const SymmFold f = symmFoldOf(name, outTile, reduceOp);
  const size_t elem = outTile.element_size();
  char* dst = static_cast<char*>(outTile.data_ptr());
  bool aside = false;
  for (auto& mm : mems) aside = aside || insideAnyBuffer(*mm, dst, tileBytes(out, elem));
  m->enqueue([m, sync, at, in, out, dst, elem, f, aside] {
    tileFold(*m, at, in, dst, out, elem, f, aside, *sync);
  });
}

void tileReduce(const at::Tensor& inTile, at::Tensor& outTile, int64_t root, std::string groupName,
                std::string reduceOp) {
  reduceTiles("tile_reduce", {inTile}, outTile, {root}, groupName, reduceOp);
}

void multiRootTileReduce(at::TensorList inTiles, at::Tensor& outTile, at::IntArrayRef roots,
                         std::string groupName, std::string reduceOp) {
  reduceTiles("multi_root_tile_reduce", inTiles, outTile, roots, groupName, reduceOp);
}

// multimem_all_gather_out: out = every rank's input, in rank order (a copy from each mapped
// buffer; xdev has no multicast).
at::Tensor allGatherOut(const at::Tensor& input, std::string groupName, at::Tensor out) {
  const char* name = "multimem_all_gather_out";
  auto m = symmetricMemoryOf(input, groupName);
  const size_t at = symmPlace(name, *m, input);
  const int world = m->get_world_size();
  TORCH_CHECK(out.is_contiguous() && out.scalar_type() == input.scalar_type() &&
                  out.device() == input.device() && out.numel() == input.numel() * world,
              "symm_mem.", name, " (xdev): out must be a contiguous ", input.scalar_type(),
              " tensor of ", input.numel() * world, " elements on ", input.device());
  const size_t bytes = input.nbytes();
  char* dst = static_cast<char*>(out.data_ptr());
  const bool aside = insideAnyBuffer(*m, dst, bytes * world);
  m->enqueue([m, at, bytes, dst, aside, world] {
    m->barrierNow(0, 0);
    std::vector<char> scratch(aside ? bytes * world : 0);
    char* to = aside ? scratch.data() : dst;
    for (int r = 0; r < world; ++r) std::memcpy(to + r * bytes, m->bufferOf(r) + at, bytes);
    m->barrierNow(0, 0);
    if (aside) std::memcpy(dst, scratch.data(), scratch.size());
  });
  return out;
}

// get_remote_tensors: x as every rank has it (the same place of each rank's buffer); null
// pointers for ranks on another host are refused.
std::vector<at::Tensor> remoteTensors(const at::Tensor& x, std::string groupName) {
  const char* name = "get_remote_tensors";
  auto m = symmetricMemoryOf(x, groupName);
  const size_t at = symmPlace(name, *m, x);
  TORCH_CHECK(at % x.element_size() == 0, "symm_mem.", name,
              " (xdev): the tensor is not aligned "
              "to its element size in its buffer");
  std::vector<at::Tensor> out;
  for (int r = 0; r < m->get_world_size(); ++r) {
    out.push_back(
        m->get_buffer(r, x.sizes(), x.scalar_type(), static_cast<int64_t>(at / x.element_size())));
  }
  return out;
}

// The all-to-all-v family (MoE's token shuffles), with splits in rows of dim 0 on the device.
// n = world * ne splits. On the sender, split i of its input goes to (peer, expert):
//   rank-major input (all_to_all_vdev, _2d: dispatch): i = peer * ne + e; the received
//     splits are laid out expert-major, o = e * world + src; offsets of the sender's splits
//     are the running sum of its splits;
//   expert-major input (_2d_offset: combine): i = e * world + peer, at the offsets given in
//     the second row of its in_splits_offsets; received rank-major, o = src * ne + e.
// Each rank pulls what it receives between two barriers; the received splits are packed in
// `o` order, each major row (an expert, or a source rank) padded to `align` rows if align > 0
// (and never empty then, as CUDA's). out_splits_offsets: row 0 the received splits, row 1
// where each begins in out.
struct Shuffle {
  int ne = 1;
  bool rankMajorIn = true;
  int64_t align = 0;
  bool inOffsets = false;  // in_splits has a second row of offsets
};

int64_t* int64Rows(const char* name, const char* what, const at::Tensor& t, int64_t rows,
                   int64_t cols) {
  TORCH_CHECK(t.scalar_type() == at::kLong && t.is_contiguous() && t.numel() == rows * cols,
              "symm_mem.", name, " (xdev): ", what, " must be a contiguous int64 tensor of ",
              rows == 1 ? "" : std::to_string(rows) + " x ", cols, " elements, got ",
              t.scalar_type(), " ", t.sizes());
  return static_cast<int64_t*>(t.data_ptr());
}

void shuffle(const char* name, const at::Tensor& input, at::Tensor& out, const at::Tensor& inSplits,
             at::Tensor& outSplitsOffsets, const std::string& groupName, const Shuffle& how) {
  auto m = symmetricMemoryOf(input, groupName);
  auto ms = symmetricMemoryOf(inSplits, groupName);
  const int world = m->get_world_size(), me = m->get_rank();
  const int64_t n = static_cast<int64_t>(world) * how.ne;
  const size_t at = symmPlace(name, *m, input);
  const size_t splitsAt = symmPlace(name, *ms, inSplits);
  int64Rows(name, "in_splits", inSplits, how.inOffsets ? 2 : 1, n);
  int64_t* outSO = int64Rows(name, "out_splits_offsets", outSplitsOffsets, 2, n);
  TORCH_CHECK(input.dim() >= 1 && input.is_contiguous() && out.is_contiguous() &&
                  out.scalar_type() == input.scalar_type() && out.device() == input.device() &&
                  out.dim() == input.dim() &&
                  out.numel() / std::max<int64_t>(1, out.size(0)) ==
                      input.numel() / std::max<int64_t>(1, input.size(0)),
              "symm_mem.", name, " (xdev): input and out must be contiguous ", input.scalar_type(),
              " tensors on one device with rows of the same size");
  const size_t rowBytes = input.size(0) == 0 ? 0 : input.nbytes() / input.size(0);
  const int64_t inRows = input.size(0), outRows = out.size(0);
  char* dst = static_cast<char*>(out.data_ptr());
  m->enqueue([m, ms, how, world, me, n, at, splitsAt, outSO, rowBytes, inRows, outRows, dst, name] {
    ms->barrierNow(0, 0);  // every rank's splits and input are in place
    const int ne = how.ne;
    std::vector<int64_t> rows(n), from(n);
    std::vector<int> src(n);
    for (int s = 0; s < world; ++s) {
      const auto* sp = reinterpret_cast<const int64_t*>(ms->bufferOf(s) + splitsAt);
      std::vector<int64_t> running(n, 0);  // the sender's offsets when it gives none
      for (int64_t i = 1; i < n && !how.inOffsets; ++i) running[i] = running[i - 1] + sp[i - 1];
      for (int e = 0; e < ne; ++e) {
        const int64_t i = how.rankMajorIn ? int64_t{me} * ne + e : int64_t{e} * world + me;
        const int64_t o = how.rankMajorIn ? int64_t{e} * world + s : int64_t{s} * ne + e;
        rows[o] = sp[i];
        from[o] = how.inOffsets ? sp[n + i] : running[i];
        src[o] = s;
        if (rows[o] < 0 || from[o] < 0 || from[o] + rows[o] > inRows) {
          throw std::runtime_error(std::string("symm_mem (xdev): ") + name + ": rank " +
                                   std::to_string(s) + " sends rows [" + std::to_string(from[o]) +
                                   ", +" + std::to_string(rows[o]) + ") of an input of " +
                                   std::to_string(inRows) + " rows");
        }
      }
    }
    // Offsets in out: major rows of `minor` splits each, padded to `align`.
    const int minor = how.rankMajorIn ? world : ne;
    int64_t end = 0;
    for (int64_t o = 0; o < n; o += minor) {
      int64_t len = 0;
      for (int k = 0; k < minor; ++k) {
        outSO[n + o + k] = end + len;
        len += rows[o + k];
      }
      if (how.align > 0) len = std::max((len + how.align - 1) / how.align * how.align, how.align);
      end += len;
    }
    if (end > outRows) {
      throw std::runtime_error(std::string("symm_mem (xdev): ") + name + ": rank " +
                               std::to_string(me) + " receives " + std::to_string(end) +
                               " rows (padding included) into an out of " +
                               std::to_string(outRows) + " rows");
    }
    for (int64_t o = 0; o < n; ++o) {
      outSO[o] = rows[o];
      std::memcpy(dst + outSO[n + o] * rowBytes, m->bufferOf(src[o]) + at + from[o] * rowBytes,
                  rows[o] * rowBytes);
    }
    ms->barrierNow(0, 0);  // nobody changes its input while a peer still reads it
  });
}

void allToAllV(const at::Tensor& input, at::Tensor& out, const at::Tensor& inSplits,
               at::Tensor& outSplitsOffsets, std::string groupName) {
  shuffle("all_to_all_vdev", input, out, inSplits, outSplitsOffsets, groupName, Shuffle{});
}

void allToAllV2d(const at::Tensor& input, at::Tensor& out, const at::Tensor& inSplits,
                 at::Tensor& outSplitsOffsets, std::string groupName,
                 std::optional<int64_t> majorAlign) {
  const char* name = "all_to_all_vdev_2d";
  auto m = symmetricMemoryOf(inSplits, groupName);
  const int64_t world = m->get_world_size();
  TORCH_CHECK(inSplits.numel() % world == 0 && inSplits.numel() > 0, "symm_mem.", name,
              " (xdev): in_splits has ", inSplits.numel(), " elements, not a multiple of the ",
              world, " ranks");
  Shuffle how;
  how.ne = static_cast<int>(inSplits.numel() / world);
  how.align = majorAlign.value_or(0);
  TORCH_CHECK(how.align >= 0, "symm_mem.", name, " (xdev): major_align ", how.align, " < 0");
  shuffle(name, input, out, inSplits, outSplitsOffsets, groupName, how);
}

void allToAllV2dOffset(const at::Tensor& input, at::Tensor& out, const at::Tensor& inSplitsOffsets,
                       at::Tensor& outSplitsOffsets, std::string groupName) {
  const char* name = "all_to_all_vdev_2d_offset";
  auto m = symmetricMemoryOf(inSplitsOffsets, groupName);
  const int64_t world = m->get_world_size();
  TORCH_CHECK(inSplitsOffsets.dim() == 2 && inSplitsOffsets.size(0) == 2 &&
                  inSplitsOffsets.size(1) % world == 0 && inSplitsOffsets.size(1) > 0,
              "symm_mem.", name, " (xdev): in_splits_offsets must be 2 x (experts x ", world,
              " ranks), got ", inSplitsOffsets.sizes());
  Shuffle how;
  how.ne = static_cast<int>(inSplitsOffsets.size(1) / world);
  how.rankMajorIn = false;
  how.inOffsets = true;
  shuffle(name, input, out, inSplitsOffsets, outSplitsOffsets, groupName, how);
}

[[maybe_unused]] const bool kSymmCollectivesRegistered = [] {
  static torch::Library lib(torch::Library::IMPL, "symm_mem", c10::DispatchKey::PrivateUse1,
                            __FILE__, __LINE__);
  symmImpl(lib, "tile_reduce", tileReduce);
  symmImpl(lib, "multi_root_tile_reduce", multiRootTileReduce);
  symmImpl(lib, "multimem_all_gather_out", allGatherOut);
  symmImpl(lib, "get_remote_tensors", remoteTensors);
  symmImpl(lib, "all_to_all_vdev", allToAllV);
  symmImpl(lib, "all_to_all_vdev_2d", allToAllV2d);
  symmImpl(lib, "all_to_all_vdev_2d_offset", allToAllV2dOffset);
  return true;
}();

}  // namespace
}  // namespace torch_xccl
