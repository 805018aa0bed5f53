// Perplexity and KL divergence as llama.cpp's llama-perplexity computes them, so the numbers compare
// across the two engines and between quantisations of one model.
//
// Perplexity: the text's tokens (with the tokenizer's BOS) are cut into n_chunk chunks of n_ctx
// tokens; each chunk runs from an empty cache with its first token replaced by BOS (when the
// vocabulary adds one), and the second half of it is scored: positions n_ctx/2 .. n_ctx-2 predict
// the next token. PPL = exp(mean negative log-likelihood), its error the standard error of that
// mean times PPL.
//
// KL divergence: llama.cpp's logits file (--kl-divergence-base) holds the base model's tokens and
// its scored log-probabilities, 16-bit quantised per row; a second model is run on the same
// tokens and compared row by row: KL(base || model), the log-probability of the actual token
// (Δp), and whether both put the same token on top.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace dspark {

struct PerplexityOptions {
  int n_ctx = 512;       // tokens per chunk (llama-perplexity -c)
  int n_batch = 2048;    // rows per forward pass, at most n_ctx (-b)
  int n_chunks = -1;     // at most this many chunks; -1: all the text gives (--chunks)
  DType cache_type = DType::kF16;
  bool add_bos = true;   // the tokenizer's add_bos: each chunk's first token becomes BOS
  int32_t bos_id = -1;
};

// llama.cpp's logits file: "_logits_", int32 n_ctx, int32 n_vocab, int32 n_chunk, int32 tokens
// [n_chunk * n_ctx], then per chunk n_ctx - 1 - n_ctx/2 rows of nv = 2 * ((n_vocab + 1) / 2) + 4
// uint16: a float scale and a float min_log_prob (4 uint16), then n_vocab log-probabilities, each
// min_log_prob + scale * q (q = 0 below max - 16).
struct LogitsFileHeader {
  int32_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
  std::vector<int32_t> tokens;
  int RowValues() const { return 2 * ((n_vocab + 1) / 2) + 4; }
  int RowsPerChunk() const { return n_ctx - 1 - n_ctx / 2; }
};
// Reads and checks the header; `in` is then at the first chunk's rows.
Result<LogitsFileHeader> ReadLogitsHeader(std::ifstream& in, const std::string& path);

// Called after each chunk: (chunks done, chunks in all).
using ChunkProgress = std::function<void(int, int)>;

struct PerplexityResult {
  int n_chunk = 0;
  int64_t count = 0;               // scored tokens
  double ppl = 0, ppl_error = 0;   // llama.cpp's "Final estimate: PPL = x +/- e"
  std::vector<double> running;     // PPL after each chunk ("[i]ppl," in llama.cpp's output)
};

// Perplexity of `tokens` (the whole text, tokenised with BOS as the tokenizer adds it). With
// `logits_out`, also writes llama.cpp's logits file of the scored rows (--kl-divergence-base).
Result<PerplexityResult> Perplexity(Model& model, ThreadPool& pool, std::vector<int32_t> tokens,
                                    const PerplexityOptions& options, const std::string& logits_out = "",
                                    const ChunkProgress& progress = nullptr);

struct KlDivergenceResult {
  int64_t count = 0;
  double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0, sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
  float max_p_diff = 0;
  int64_t n_same_top = 0;
  std::vector<float> kld_values, p_diff_values;  // per scored token, in order
  // Mean and standard error of a sum over `count` values (llama.cpp's mean_and_uncertainty).
  static std::pair<double, double> MeanAndError(double sum, double sum2, int64_t count);
};

// Runs `model` on the tokens of llama.cpp's logits file `base_path` and compares each scored row.
// The file's n_vocab must be the model's.
Result<KlDivergenceResult> KlDivergence(Model& model, ThreadPool& pool, const std::string& base_path,
                                        const PerplexityOptions& options, const ChunkProgress& progress = nullptr);

// Percentile of sorted values as llama.cpp's (linear between neighbours).
float Percentile(const std::vector<float>& sorted, float fraction);

}  // namespace dspark
