// Weights of a transformer (dense or mixture-of-experts FFN blocks) bound to tensors of a GGUF file (zero-copy: matrices point into
// the mapping), with every tensor's shape and type checked against the hyperparameters.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/config.h"

namespace dspark {

struct LayerWeights {
  std::vector<float> attn_norm;        // [n_embd]
  ops::WeightView wq, wk, wv, wo;      // [q_dim, n_embd], [kv_dim, n_embd], [v_dim, n_embd], [n_embd, n_head*head_dim_v]
  std::vector<float> bq, bk, bv;       // optional biases
  std::vector<float> q_norm, k_norm;   // [head_dim], qwen3 only
  std::vector<float> ffn_norm;         // [n_embd]
  ops::WeightView w_gate, w_up;        // [n_ff, n_embd]
  ops::WeightView w_down;              // [n_embd, n_ff]
  // With packed weights: wq|wk|wv and w_gate|w_up as one packed matrix each (PackedWeights::
  // PackFused), when their types allow; empty (rows == 0) otherwise.
  ops::WeightView wqkv, w_gate_up;
  // A mixture-of-experts block (config.moe) instead of the dense FFN: the router [n_expert,
  // n_embd] and per expert its gate / up [n_ff_exp, n_embd] and down [n_embd, n_ff_exp], views of
  // the 3-D ffn_{gate,up,down}_exps tensors; gate_up_exps as w_gate_up, per expert.
  ops::WeightView router;
  std::vector<ops::WeightView> gate_exps, up_exps, down_exps, gate_up_exps;
};

struct ModelWeights {
  ops::WeightView tok_embd;     // [n_vocab, n_embd]
  std::vector<float> output_norm;
  ops::WeightView output;       // [n_vocab, n_embd]; == tok_embd when tied
  std::vector<LayerWeights> layers;
};

// How one tensor must look. Shapes use ggml order (innermost first).
enum class TensorRequirement { kRequired, kOptional };

// Binds the weights of a dense llama-family model. Errors name the tensor, its byte offset, the
// expected and actual shape. Tensors nobody claims are reported through `unclaimed`.
Result<ModelWeights> BindDenseWeights(const gguf::File& file, const ModelConfig& config,
                                      std::vector<std::string>* unclaimed);

}  // namespace dspark
