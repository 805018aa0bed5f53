// Tiny random-weight GGUFs for the DSpark tests: a qwen3 target and dflash drafts in llama.cpp's
// layout (shared/research/dspark-llamacpp.md §1), written with gguf::Writer. Values come from a
// fixed-seed generator of their own (not model/synth.cc), so the goldens that
// tests/data/dspark/make_golden.py computes from these files stay valid whatever synth does.
// Every field that a refusal test needs to break is a knob.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "util/status.h"

namespace dspark::testing {

struct TinyTargetSpec {
  int n_vocab = 64;
  int n_embd = 32;
  int n_layer = 3;
  int n_head = 4;
  int n_head_kv = 2;
  int head_dim = 8;
  int n_ff = 64;
  float embd_gain = 1.0f;  // token embedding std
  bool tied = false;       // false: an output.weight of its own (keeps greedy output from echoing the input)
  float output_gain = 4.0f;
  float weight_gain = 1.5f;
  uint64_t seed = 7;
};

struct DflashSpec {
  // Backbone (width always the target's unless n_embd_override).
  int n_layer = 1;
  int n_head = 4;
  int n_head_kv = 2;
  int head_dim = 8;
  int n_ff = 48;
  int n_embd_override = 0;
  std::vector<int> target_layers = {1, 2};  // as stored in the file (+1 convention)
  int block_size = 4;
  bool sample_from_anchor = true;
  bool causal = false;
  int markov_rank = 8;        // 0: a DFlash draft (no Markov head)
  bool confidence = true;     // conf_proj + bias (needs markov_rank > 0)
  bool write_has_conf_key = true;
  bool own_embd = false;      // token_embd.weight of its own (else the target's)
  bool own_output = false;    // output.weight of its own
  int n_vocab_draft = 0;      // > 0: a d2t reduced vocabulary of this size (implies own_output)
  bool fc_scale = false;
  bool markov_scale = false;
  bool attn_sinks = false;
  int mask_token_id = 60;     // < 0: no tokenizer.ggml.mask_token_id key
  // Crafted-file knobs for refusal tests.
  std::string arch = "dflash";
  bool write_target_layers = true;
  bool write_tokenizer = true;
  int rename_token = -1;      // >= 0: change this token's text
  float gain = 1.0f;
  uint64_t seed = 101;
};

// An EAGLE-3 head (llama.cpp's eagle3 layout) for a tiny target.
struct Eagle3Spec {
  int n_embd_override = 0;  // > 0: a head of another width than the target (needs own_embd and own_output)
  int n_head = 4;
  int n_head_kv = 2;
  int head_dim = 8;
  int n_ff = 48;
  std::vector<int> target_layers = {1, 2, 3};  // inputs of these target layers (3 = the last one's output)
  bool own_embd = false;
  bool own_output = false;
  int n_vocab_draft = 0;  // > 0: a d2t reduced vocabulary of this size (implies own_output)
  bool norm_before_residual = false;
  bool norm_before_fc = false;
  // Crafted-file knobs for refusal tests.
  std::string arch = "eagle3";
  int block_count = 1;
  int target_hidden_override = 0;
  bool write_target_layers = true;
  bool write_tokenizer = true;
  bool write_enc_norm = true;  // with norm_before_fc
  int rename_token = -1;
  float gain = 1.0f;
  uint64_t seed = 131;
};
Status WriteEagle3(const Eagle3Spec& spec, const gguf::File& target, const std::string& path);

// The models behind tests/data/dspark/golden.json (make_golden.py documents how to regenerate it):
// the target, "a" (anchor-first DSpark, confidence head, taps incl. the embedding and the last
// layer's output) and "b" (bonus-anchor, d2t, own embedding, sinks, causal block, scales, 2 layers).
TinyTargetSpec GoldenTarget();
DflashSpec GoldenDraft(char which);
// Writes golden_target.gguf, golden_draft_a.gguf and golden_draft_b.gguf into `dir`.
Status WriteGoldenModels(const std::string& dir);

// A qwen3 target with a toy SentencePiece-style vocabulary.
Status WriteTinyTarget(const TinyTargetSpec& spec, const std::string& path);
// A dflash draft for `target` (its tokenizer is copied).
Status WriteDflash(const DflashSpec& spec, const gguf::File& target, const std::string& path);

}  // namespace dspark::testing
