// One forward pass's input: rows of (token, position, sequence), possibly from many sequences
// (continuous batching), an optional attention mask among the rows, and which rows need logits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dspark {

struct BatchRow {
  int32_t token = 0;
  int32_t pos = 0;      // RoPE position
  int32_t seq = 0;      // sequence (KV cache slot)
  bool logits = false;  // return this row's logits
};

struct Batch {
  std::vector<BatchRow> rows;
  // Optional visibility among this batch's rows, [n_rows * n_rows], row-major: mask[i * n + j] != 0
  // lets row i attend to row j's K/V. Only rows of the same sequence can ever see each other, and
  // every row always sees the cells its sequence held before this batch. Empty means causal by
  // row order within each sequence. Bidirectional draft blocks and token trees set it.
  std::vector<uint8_t> mask;

  void Add(int32_t token, int32_t pos, int32_t seq, bool logits) { rows.push_back({token, pos, seq, logits}); }
  int size() const { return static_cast<int>(rows.size()); }
  void Clear() {
    rows.clear();
    mask.clear();
  }
};

// Wall time of forward passes by phase, summed over layers and passes (ForwardOptions::profile):
// where a pass of k rows spends its time, and what each extra verification row adds.
struct ForwardProfile {
  enum Phase {
    kSetup,      // validation, embedding lookup, rope angles, attention plan
    kNorm,       // the two RMS norms of each layer
    kQkv,        // q/k/v projections
    kRope,       // q/k norm, rope and the KV-cache write
    kAttention,  // scores, softmax and values
    kAttnOut,    // output projection and residual add
    kGateUp,     // gate/up projections
    kSwiglu,     // silu(gate) * up
    kDown,       // down projection and residual add
    kHead,       // final norm and LM head
    kNumPhases
  };
  static const char* Name(int phase);
  double ms[kNumPhases] = {};
  int64_t passes = 0;
  double TotalMs() const;
};

struct ForwardOptions {
  // Layers whose input residual stream (the hidden state entering the layer) is returned for every
  // row; a value of n_layer taps the output of the last layer before the final norm.
  std::vector<int> tap_layers;
  // When set, the pass adds its time per phase here (a clock read per phase and layer; nothing
  // when null).
  ForwardProfile* profile = nullptr;
};

struct ForwardOutput {
  std::vector<int> logit_rows;  // batch row index of each logits row, in row order
  std::vector<float> logits;    // [logit_rows.size(), n_vocab]
  std::vector<std::vector<float>> taps;  // one per tap layer: [n_rows, n_embd]
  // Model::ForwardNextn: the normed output of the logits rows [logit_rows.size(), n_embd], the h of
  // the next multi-token-prediction step. Empty for the trunk.
  std::vector<float> hidden;
  // Mixture-of-experts models: the distinct experts the pass read, summed over blocks (the
  // weights a pass streams grow with this union, not with its rows). 0 for dense models.
  int64_t experts_read = 0;

  const float* Logits(size_t k, int n_vocab) const { return logits.data() + k * static_cast<size_t>(n_vocab); }
};

}  // namespace dspark
