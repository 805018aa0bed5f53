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
  std::vector<float> exp_probs_b;  // [n_expert] selection bias (DeepSeek V3); empty if none
  // Shared experts (config.moe.n_shared): one SwiGLU of n_shared * n_ff_exp every token runs.
  ops::WeightView gate_shexp, up_shexp, down_shexp, gate_up_shexp;

  // Multi-head latent attention (config.mla) instead of wq / wk / wv: the query (wq, or the
  // LoRA wq_a, its norm and wq_b), the latent and shared RoPE key (wkv_a [kv_lora_rank + rope_dim,
  // n_embd]) and the latent's norm, and per head wk_b [kv_lora_rank, nope_dim] (a query's non-RoPE
  // part into the latent space) and wv_b [v_dim, kv_lora_rank] (its output back out).
  ops::WeightView wq_a, wq_b, wkv_a;
  std::vector<float> q_a_norm, kv_a_norm;
  std::vector<ops::WeightView> wk_b, wv_b;
};

// What a multi-token-prediction block (config.n_nextn) adds to its decoder block's weights, as
// llama.cpp names them: blk.N.nextn.{eh_proj, enorm, hnorm} and, optionally, an embedding, head
// and head norm of its own (else the trunk's token_embd, output and output_norm serve).
struct NextnWeights {
  ops::WeightView eh_proj;             // [n_embd, 2 n_embd]: [enorm(embedding) ; hnorm(h)] -> n_embd
  std::vector<float> enorm, hnorm;     // [n_embd]
  std::vector<float> shared_head_norm;  // [n_embd]; empty: output_norm
  ops::WeightView embed_tokens;        // [n_vocab, n_embd]; rows == 0: tok_embd
  ops::WeightView shared_head_head;    // [n_vocab, n_embd]; rows == 0: output
};

struct ModelWeights {
  ops::WeightView tok_embd;     // [n_vocab, n_embd]
  std::vector<float> output_norm;
  ops::WeightView output;       // [n_vocab, n_embd]; == tok_embd when tied
  // The trunk's n_layer blocks, then the n_nextn multi-token-prediction blocks.
  std::vector<LayerWeights> layers;
  std::vector<NextnWeights> nextn;  // [n_nextn]
  // Matrices the loader derives from the file's (MLA's wk_b from an older file's combined
  // attn_kv_b, transposed), which views above point into.
  std::vector<std::vector<float>> derived;
};

// How one tensor must look. Shapes use ggml order (innermost first).
enum class TensorRequirement { kRequired, kOptional };

// Binds the weights of a dense llama-family model. Errors name the tensor, its byte offset, the
// expected and actual shape. Tensors nobody claims are reported through `unclaimed`.
Result<ModelWeights> BindDenseWeights(const gguf::File& file, const ModelConfig& config,
                                      std::vector<std::string>* unclaimed);

}  // namespace dspark
