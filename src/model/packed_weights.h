// Owner of the in-memory copies of a model's weight matrices. Packed copies (ops::PackWeights): on
// CPUs with a packed kernel (Q8_0, Q4_K, Q6_K on AVX-512 VNNI), decode and verification read 16
// weight rows per vector instead of one row at a time, which decodes much faster than the row
// layout. Every MatMul of a packed matrix reads the copy (ops::MatMul); the view keeps pointing at
// its original rows too (the token embedding is looked up row by row, and a DSpark drafter
// re-encodes the target's LM head from them). Matrices without a packed layout get a row-layout
// copy (CopyUnpacked), which their view's `data` then points at. All copies sit on huge pages.
// Model::FromFile drops the file's pages of the replaced matrices (gguf::File::ReleasePages); a
// later read of them maps them again.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "util/huge_page_arena.h"

namespace dspark {

class PackedWeights {
 public:
  // Packs every view whose type has a packed layout on this CPU and sets its `packed` pointer.
  // Views of the same matrix (tied embeddings: output == tok_embd) share one copy. `threads`
  // workers split the packing (0: physical cores).
  void Pack(const std::vector<ops::WeightView*>& views, int threads = 0);

  // Packs the matrices `parts` (same type and width, each read with the same activations) as one
  // matrix whose rows are theirs one after another, into `fused` (rows summed; `data` null: the
  // fused matrix exists only packed). One MatMul then serves all of them: one parallel loop and one
  // barrier instead of several, and small matrices (K/V projections) no longer run alone on a
  // handful of row groups. Each output row is computed exactly as in its own matrix. Returns false
  // (and leaves `fused` empty) when the parts differ in type or width or the type has no packed
  // layout on this CPU.
  bool PackFused(const std::vector<const ops::WeightView*>& parts, ops::WeightView* fused, int threads = 0);

  // Copies the rows of each view that has no packed copy (its type has no packed layout on this
  // CPU) into this owner's memory and points `data` there, in the same row layout: the row-layout
  // kernels then stream from huge pages too (fewer TLB misses on DRAM-bound models). Views of the
  // same rows share one copy.
  void CopyUnpacked(const std::vector<ops::WeightView*>& views);

  // Bytes and count of the packed copies; bytes of the row-layout copies.
  size_t bytes() const { return packed_bytes_; }
  size_t matrices() const { return matrices_; }
  size_t copied_bytes() const { return arena_.allocated() - packed_bytes_; }
  // Whether the copies sit on transparent huge pages (util/huge_page_arena.h); false without any.
  bool huge_pages() const { return arena_.huge_pages(); }

 private:
  void* Allocate(size_t n);

  // The copies (packed and row-layout), one after another on 2 MiB pages: a decode step streams
  // all of them.
  HugePageArena arena_;
  size_t matrices_ = 0, packed_bytes_ = 0;
};

}  // namespace dspark
