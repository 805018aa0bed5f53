// Loading an EAGLE-3 draft head (general.architecture = eagle3, llama.cpp's layout: its
// src/models/eagle3.cpp and convert_hf_to_gguf.py) and checking it against its target. Owns the
// mapped file and the bound weights; the forward pass is model/eagle3_forward.h.
//
// The head: g = fc([f_L1 ; f_L2 ; f_L3]) fuses the residual streams entering three target layers
// (eagle3.target_layers, the same +1 convention as dflash.target_layers). One decoder layer reads,
// at position P, the pair (token P+1, g_P): x = [RMSNorm(embed(token)) ; RMSNorm_hidden(g)] (2E
// wide) feeds Q/K/V, the attention output adds to g (or to RMSNorm_hidden(g) with
// norm_before_residual), a SwiGLU FFN follows; its pre-norm output h is the next draft step's g,
// and RMSNorm(h) through the LM head gives the logits. llama-style RoPE (adjacent pairs), no
// Q/K norms.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/model.h"
#include "model/packed_weights.h"

namespace dspark {

struct Eagle3Config {
  int n_embd = 0;  // the head's width (may differ from the target's)
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  float rms_eps = 1e-6f;
  RopeConfig rope;
  // eagle3.target_layers (three): the target layers whose *input* residual stream is fused, in order.
  std::vector<int> target_layers;
  int target_hidden = 0;              // eagle3.target_hidden_size = the target's width
  bool norm_before_residual = false;  // the residual adds RMSNorm_hidden(g), not g
  bool norm_before_fc = false;        // RMSNorm (enc.output_norm) over the fused features before fc
  int n_vocab = 0;                    // target vocabulary
  int n_vocab_draft = 0;              // rows of the LM head (== n_vocab unless d2t)

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  int n_features() const { return static_cast<int>(target_layers.size()) * target_hidden; }
};

struct Eagle3Weights {
  ops::WeightView fc;                 // [E, 3 E_t]
  std::vector<float> enc_norm;        // [3 E_t], with norm_before_fc
  std::vector<float> attn_norm;       // [E]  on the token embedding
  std::vector<float> hidden_norm;     // [E]  blk.0.attn_norm_2, on g
  ops::WeightView wq, wk, wv;         // [q_dim | kv_dim, 2E]
  ops::WeightView wo;                 // [E, q_dim]
  std::vector<float> ffn_norm;        // [E]
  ops::WeightView w_gate, w_up;       // [n_ff, E]
  ops::WeightView w_down;             // [E, n_ff]
  std::vector<float> output_norm;     // [E]
  ops::WeightView tok_embd;           // [V, E]: the head's own or the target's
  ops::WeightView output;             // [V_d, E]: the head's own or the target's
  std::vector<int32_t> d2t;           // [V_d] absolute target ids; empty when V_d == V
  // Fused packed copies (rows == 0 where the type has no packed layout).
  ops::WeightView wqkv, w_gate_up;
};

struct Eagle3LoadOptions {
  bool repack = true;  // pack the head's matrices for this CPU's kernels
};

class Eagle3Model {
 public:
  // Opens `path` and checks it against the target: architecture, three target layers within the
  // target, target_hidden_size equal to the target's width, every tensor's shape, and a head or
  // embedding borrowed from the target only where widths agree. Errors name the file and the key
  // or tensor at fault. (The tokenizer is the drafter factory's check.)
  static Result<std::unique_ptr<Eagle3Model>> Load(const std::string& path, const Model& target,
                                                   const Eagle3LoadOptions& options = {});
  static Result<std::unique_ptr<Eagle3Model>> FromFile(std::shared_ptr<const gguf::File> file, const Model& target,
                                                       const Eagle3LoadOptions& options = {});

  const Eagle3Config& config() const { return config_; }
  const Eagle3Weights& weights() const { return weights_; }
  const std::string& path() const { return file_->path(); }
  const gguf::File& file() const { return *file_; }

 private:
  Eagle3Model() = default;
  Status ReadConfig(const ModelConfig& target);
  Status Bind(const Model& target);
  void Pack(bool pack_output);

  std::shared_ptr<const gguf::File> file_;
  Eagle3Config config_;
  Eagle3Weights weights_;
  PackedWeights packed_;
  std::vector<uint8_t> own_head_;  // the shared target head re-encoded in the head's type
};

}  // namespace dspark
