// What every draft GGUF that runs beside a target (dflash / DSpark, eagle3) reads the same way:
// tensors claimed by name with checked shapes and types, bounded positive hyperparameters, and
// the vocabulary head (the draft's own embedding and LM head or the target's, and d2t for a
// reduced draft vocabulary, as llama.cpp stores it).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "util/status.h"

namespace dspark {

// Claims tensors by name, checks shapes (ggml order) and types, remembers what was claimed.
// `kind` names the draft in errors ("dflash draft", "eagle3 draft").
class DraftBinder {
 public:
  DraftBinder(const gguf::File& f, std::string kind) : f_(f), kind_(std::move(kind)) {}

  Result<const gguf::TensorInfo*> Find(const std::string& name, const std::vector<int64_t>& ne, bool required);
  Result<ops::WeightView> Matrix(const std::string& name, int64_t cols, int64_t rows, bool required = true);
  // Float vectors, or quantised ones another tool wrote (dequantised once here).
  Result<std::vector<float>> Vector(const std::string& name, int64_t n, bool required = true);
  // A per-tensor scale ({1}), 1 if absent.
  Result<float> Scale(const std::string& name);
  void WarnUnclaimed() const;

 private:
  const gguf::File& f_;
  std::string kind_;
  std::set<std::string> claimed_;
};

// A positive integer key at most 2^26 (a file's claim that sizes allocations); `fallback` >= 0
// makes the key optional.
Result<int> ReadPositive(const gguf::File& f, const std::string& key, int64_t fallback = -1);

// The shape of a draft's transformer layers: `<arch>.embedding_length`, block_count,
// feed_forward_length, attention.head_count (_kv), key_length = value_length (default
// n_embd / n_head), layer_norm_rms_epsilon (default 1e-6), each range-checked.
struct DraftLayerShape {
  int n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  float rms_eps = 1e-6f;
};
Result<DraftLayerShape> ReadDraftLayerShape(const gguf::File& f, const std::string& arch);

// The vocabulary side of a draft of width `n_embd`: its own token_embd.weight or the target's, its
// own output.weight or the target's, and d2t (absolute target ids, i64, each at most once; it
// needs the draft's own head). The target's tables serve only if they are n_embd wide.
struct DraftVocabHead {
  ops::WeightView tok_embd;   // [n_vocab, n_embd]
  ops::WeightView output;     // [n_vocab_draft, n_embd]
  std::vector<int32_t> d2t;   // [n_vocab_draft]; empty when the head covers the whole vocabulary
  int n_vocab_draft = 0;
  bool own_output = false;
};
Result<DraftVocabHead> BindVocabHead(const gguf::File& f, const Model& target, int64_t n_embd, DraftBinder& b);

// A quantised drafter reads a shared float head in its own type: the head is a large part of a
// drafting pass's weight traffic, and verification keeps the output exact whatever the drafter
// computes (it can only change which tokens get drafted). Re-encodes `output` into `storage` and
// points it there; returns whether it did (false: nothing to gain, or the type cannot).
bool ReencodeSharedHeadInto(DType own_type, ops::WeightView& output, std::vector<uint8_t>& storage);

// Scatters rows of reduced-vocabulary logits [n_rows, d2t.size()] into full-vocabulary rows
// [n_rows, n_vocab]: out[d2t[k]] = in[k], -inf elsewhere. Without d2t, a copy.
void ScatterDraftLogits(const float* in, int n_rows, const std::vector<int32_t>& d2t, int n_vocab, float* out);

}  // namespace dspark
