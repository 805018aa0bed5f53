// Multi-head latent attention (deepseek2, config.mla) around the shared attention kernel: the
// queries are mapped into the latent space and the cache gets each row's latent key and value;
// after attention, each head's latent output leaves through its wv_b and the heads through wo.
#pragma once

#include <vector>

#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace dspark {

// For n rows of normed activations h [n, n_embd]: writes the queries q [n, n_head, kv_lora_rank +
// rope_dim] (each head's q_nope through wk_b, then its roped q_pe) and each row's cache entry kv
// [n, kv_lora_rank + rope_dim]: the key [latent, roped k_pe], whose latent is also the value.
// cos_t / sin_t: each row's RoPE tables [n, rope_dim / 2].
void MlaQueries(const ModelConfig& c, const LayerWeights& layer_weights, const Rope& rope, const float* h, int n,
                const float* cos_t, const float* sin_t, float* q, float* kv, ThreadPool& pool);

// Adds the attention block's output to x [n, n_embd] from attention's latent output att [n, n_head,
// kv_lora_rank]: each head through its wv_b, then wo.
void MlaOutput(const ModelConfig& c, const LayerWeights& layer_weights, const float* att, int n, float* x,
               ThreadPool& pool);

}  // namespace dspark
