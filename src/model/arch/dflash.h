// Loading a DFlash / DSpark draft GGUF (general.architecture = dflash, llama.cpp's layout; see
// shared/research/dspark-llamacpp.md §1) and checking it against its target. Owns the mapped
// file and the bound weights; knows nothing about drafting (dflash_forward.h, dspark_heads.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/model.h"

namespace dspark {

// Slots of the noise block [anchor, MASK, ...] that carry drafts (§3.6, §4.1).
enum class BlockLayout {
  kAnchorFirst,  // DSpark sample_from_anchor = true: slot i (from 0) predicts position n+i+1
  kBonusAnchor,  // DFlash, and DSpark with sample_from_anchor = false: slots 1.. predict in place
};

struct DflashConfig {
  // Draft backbone hparams (Qwen3-style: q/k norm, NeoX RoPE, SwiGLU).
  int n_embd = 0;     // = target hidden size
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  float rms_eps = 1e-6f;
  RopeConfig rope;
  // dflash.target_layers as stored (already +1): the target layers whose *input* residual stream
  // is tapped, in GGUF order; features are concatenated in this order.
  std::vector<int> target_layers;
  int block_size = 16;          // dflash.block_size (trained block length)
  bool causal = false;          // dflash.attention.causal: causal attention inside the block
  BlockLayout layout = BlockLayout::kAnchorFirst;
  int32_t mask_token_id = -1;   // tokenizer.ggml.mask_token_id
  int n_vocab = 0;              // target vocabulary (rows of the embedding / markov_w1)
  int n_vocab_draft = 0;        // V_d: rows of the LM head (== n_vocab unless d2t)
  int markov_rank = 0;          // R; 0 = no Markov head (DFlash)
  bool has_confidence = false;  // conf_proj present and enabled

  // Most draft tokens one block yields.
  int max_drafts() const { return layout == BlockLayout::kAnchorFirst ? block_size : block_size - 1; }
  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
};

struct DflashLayer {
  std::vector<float> attn_norm;       // [n_embd]
  ops::WeightView wq, wk, wv, wo;     // [q_dim, E], [kv_dim, E] x2, [E, q_dim]
  std::vector<float> q_norm, k_norm;  // [head_dim]
  std::vector<float> attn_sinks;      // [n_head], optional per-head sink logits
  std::vector<float> ffn_norm;        // [n_embd]
  ops::WeightView w_gate, w_up;       // [n_ff, E]
  ops::WeightView w_down;             // [E, n_ff]
  // Fused packed copies (PackedWeights::PackFused; rows == 0 where the type has no packed
  // layout): one MatMul and one barrier instead of two or three, which matters at the 1-8 rows of
  // a drafting pass. wkv serves the context injection, which needs no queries.
  ops::WeightView wqkv, wkv, w_gate_up;
};

struct DflashWeights {
  ops::WeightView fc;               // [E, L_t*E]
  float fc_scale = 1.0f;            // fc.scale (optional)
  std::vector<float> enc_norm;      // enc.output_norm.weight [E]
  std::vector<float> output_norm;   // [E]
  ops::WeightView tok_embd;         // [V, E]: the draft's own or the target's
  ops::WeightView output;           // [V_d, E]: the draft's own or the target's
  std::vector<int32_t> d2t;         // [V_d] absolute target ids; empty when V_d == V
  std::vector<DflashLayer> layers;
  ops::WeightView markov_w1;        // [V, R] (an embedding table over target ids)
  ops::WeightView markov_w2;        // [V_d, R]
  float markov_scale = 1.0f;        // markov_w2.scale (optional)
  std::vector<float> conf_w;        // conf_proj.weight [E + R]: hidden first, then W1[prev]
  float conf_b = 0.0f;              // conf_proj.bias
};

struct DflashLoadOptions {
  // Pack the drafter's matrices for this CPU's kernels (model/packed_weights.h).
  bool repack = true;
};

// A dflash draft network: what the file contains decides what it is. DSpark = the DFlash backbone
// + a Markov head (markov_w1.weight, as llama.cpp tells them apart) + an optional confidence head.
class DflashModel {
 public:
  // Opens `path` and checks it against the target: architecture, draft width, tapped layers, mask
  // token, every tensor's shape. Errors name the file and the key or tensor at fault. (Whether the
  // draft suits a --spec-type, and its tokenizer, are the drafter's checks: speculative/drafters.)
  static Result<std::unique_ptr<DflashModel>> Load(const std::string& path, const Model& target,
                                                   const DflashLoadOptions& options = {});
  static Result<std::unique_ptr<DflashModel>> FromFile(std::shared_ptr<const gguf::File> file, const Model& target,
                                                       const DflashLoadOptions& options = {});

  const DflashConfig& config() const { return config_; }
  const DflashWeights& weights() const { return weights_; }
  const std::string& path() const { return file_->path(); }
  const gguf::File& file() const { return *file_; }

 private:
  DflashModel() = default;
  Status ReadConfig(const ModelConfig& target);
  bool ReencodeSharedHead();
  void Pack(bool pack_output);

  std::shared_ptr<const gguf::File> file_;
  DflashConfig config_;
  DflashWeights weights_;
  PackedWeights packed_;
  std::vector<uint8_t> own_head_;  // the shared target head re-encoded in the drafter's type
};

}  // namespace dspark
