// Owner of the packed copies of a model's weight matrices (ops::PackWeights): on CPUs with a
// packed kernel (Q8_0, Q4_K, Q6_K on AVX-512 VNNI), decode and verification read 16 weight rows
// per vector instead of one row at a time, about twice the decode speed of the row layout. Each
// view keeps pointing at its original rows too: the token embedding is looked up row by row, and
// prefill-sized batches still run the row-layout kernels.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kernels/ops.h"

namespace dspark {

class PackedWeights {
 public:
  // Packs every view whose type has a packed layout on this CPU and sets its `packed` pointer.
  // Views of the same matrix (tied embeddings: output == tok_embd) share one copy. `threads`
  // workers split the packing (0: physical cores).
  void Pack(const std::vector<ops::WeightView*>& views, int threads = 0);

  size_t bytes() const { return bytes_; }
  size_t matrices() const { return buffers_.size(); }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<void, Free>> buffers_;
  size_t bytes_ = 0;
};

}  // namespace dspark
