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

// tile_reduce: the root's out_tile = the fold of every rank's in_tile (a 2-D view, any
// strides, of its symmetric buffer); the other ranks take part (their out_tile is untouched).
void tileReduce(const at::Tensor& inTile, at::Tensor& outTile, int64_t root, std::string groupName,
                std::string reduceOp) {
  const char* name = "tile_reduce";
  const Tile in = tileOf(name, "in_tile", inTile);
  const Tile out = tileOf(name, "out_tile", outTile);
  checkTileOut(name, inTile, outTile);
  auto m = symmetricMemoryOf(inTile, groupName);
  TORCH_CHECK(root >= 0 && root < m->get_world_size(), "symm_mem.", name, " (xdev): root ", root,
              " is not a rank of group ", groupName, " (", m->get_world_size(), " ranks)");
  const size_t at = tilePlace(name, *m, inTile, in);
  const SymmFold f = symmFoldOf(name, inTile, reduceOp);
  const size_t elem = inTile.element_size();
  if (root != m->get_rank()) {
    m->enqueue([m] {
      m->barrierNow(0, 0);
      m->barrierNow(0, 0);
    });
    return;
  }
  char* dst = static_cast<char*>(outTile.data_ptr());
  const bool aside = insideAnyBuffer(*m, dst, tileBytes(out, elem));
  m->enqueue([m, at, in, out, dst, elem, f, aside] {
    tileFold(*m, at, in, dst, out, elem, f, aside, *m);
  });
}

// multi_root_tile_reduce: tile k of every rank folds into roots[k]'s out_tile; a rank is the
// root of one tile at most; every rank takes part in all (one pair of barriers).
void multiRootTileReduce(at::TensorList inTiles, at::Tensor& outTile, at::IntArrayRef roots,
                         std::string groupName, std::string reduceOp) {
  const char* name = "multi_root_tile_reduce";
  TORCH_CHECK(!inTiles.empty(), "symm_mem.", name, " (xdev): no tiles");
  TORCH_CHECK(roots.size() == inTiles.size(), "symm_mem.", name, " (xdev): ", inTiles.size(),
              " tiles but ", roots.size(), " roots");
  const Tile out = tileOf(name, "out_tile", outTile);
  std::vector<c10::intrusive_ptr<XdevSymmetricMemory>> mems;
  for (const at::Tensor& t : inTiles) mems.push_back(symmetricMemoryOf(t, groupName));
  const int world = mems[0]->get_world_size(), me = mems[0]->get_rank();
  int mine = -1;
  for (size_t k = 0; k < inTiles.size(); ++k) {
    checkTileOut(name, inTiles[k], outTile);
    tileOf(name, "every in_tile", inTiles[k]);
    TORCH_CHECK(roots[k] >= 0 && roots[k] < world, "symm_mem.", name, " (xdev): root ", roots[k],
                " is not a rank of group ", groupName, " (", world, " ranks)");
    if (roots[k] != me) continue;
    TORCH_CHECK(mine < 0, "symm_mem.", name, " (xdev): rank ", me, " is the root of tiles ", mine,
                " and ", k, " (a rank is the root of one tile at most)");
    mine = static_cast<int>(k);
  }
  auto sync = mems[0];  // every rank's barriers on one buffer's signal pad
  if (mine < 0) {
    sync->enqueue([sync] {
      sync->barrierNow(0, 0);
      sync->barrierNow(0, 0);
    });
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

[[maybe_unused]] const bool kSymmCollectivesRegistered = [] {
  static torch::Library lib(torch::Library::IMPL, "symm_mem", c10::DispatchKey::PrivateUse1,
                            __FILE__, __LINE__);
  symmImpl(lib, "tile_reduce", tileReduce);
  symmImpl(lib, "multi_root_tile_reduce", multiRootTileReduce);
  return true;
}();

}  // namespace
}  // namespace torch_xccl
