#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dspark {

namespace {

// llama.cpp's nearest_int: round half to even through the float mantissa.
int NearestInt(float fval) {
  float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

// -log p(tok) of one row as llama.cpp computes it (float exp, double sum).
double Nll(const float* logits, int n_vocab, int tok) {
  float max_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  return -(logits[tok] - max_logit - std::log(sum_exp));
}

// The row's quantised log-probabilities (llama.cpp's log_softmax with a uint16 output); returns
// -log p(tok).
double QuantisedLogProbs(const float* logits, int n_vocab, uint16_t* out, int tok) {
  float max_logit = logits[0], min_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) {
    max_logit = std::max(max_logit, logits[i]);
    min_logit = std::min(min_logit, logits[i]);
  }
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(out, &scale, sizeof(float));
  std::memcpy(out + 2, &min_log_prob, sizeof(float));
  uint16_t* q = out + 4;
  if (scale != 0.0f) {
    const float inv_scale = 1 / scale;
    for (int i = 0; i < n_vocab; ++i)
      q[i] = logits[i] > min_logit ? static_cast<uint16_t>(NearestInt(inv_scale * (logits[i] - min_logit))) : 0;
  } else {
    std::memset(q, 0, n_vocab * sizeof(uint16_t));
  }
  return max_logit + log_sum_exp - logits[tok];
}

// One row against the base's quantised row (llama.cpp's log_softmax for KL divergence).
void CompareRow(const float* logits, int n_vocab, const uint16_t* base, int tok, KlDivergenceResult& r) {
  float max_logit = logits[0];
  int imax = 0;
  for (int i = 1; i < n_vocab; ++i)
    if (logits[i] > max_logit) max_logit = logits[i], imax = i;
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  float scale, min_log_prob;
  std::memcpy(&scale, base, sizeof(float));
  std::memcpy(&min_log_prob, base + 2, sizeof(float));
  base += 4;
  const float nll = max_logit + log_sum_exp - logits[tok];
  r.sum_nll += nll;
  r.sum_nll2 += nll * nll;
  const float nll_base = -(scale * base[tok] + min_log_prob);
  r.sum_nll_base += nll_base;
  r.sum_nll_base2 += nll_base * nll_base;
  r.sum_nll_nll_base += nll * nll_base;
  max_logit += log_sum_exp;
  double sum = 0;
  int imax_base = -1;
  float p_log_base_max = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const float p_log_base = scale * base[i] + min_log_prob;
    if (i == 0 || p_log_base > p_log_base_max) p_log_base_max = p_log_base, imax_base = i;
    if (p_log_base > -16.f) sum += std::exp(p_log_base) * (p_log_base - logits[i] + max_logit);
  }
  r.sum_kld += sum;
  r.sum_kld2 += sum * sum;
  ++r.count;
  if (imax == imax_base) ++r.n_same_top;
  const float p_diff = std::exp(-nll) - std::exp(-nll_base);
  r.sum_p_diff += p_diff;
  const double p_diff2 = static_cast<double>(p_diff) * p_diff;
  r.sum_p_diff2 += p_diff2;
  r.sum_p_diff4 += p_diff2 * p_diff2;
  r.max_p_diff = std::max(r.max_p_diff, std::fabs(p_diff));
  r.kld_values.push_back(static_cast<float>(sum));
  r.p_diff_values.push_back(p_diff);
}

// Logits of positions n_ctx/2 .. n_ctx-1 of one chunk run from an empty cache, its first token
// replaced by BOS when the vocabulary adds one.
Result<std::vector<float>> ScoredLogits(Model& model, KvCache& cache, ThreadPool& pool, const int32_t* chunk,
                                        const PerplexityOptions& o) {
  cache.ClearAll();
  const int first = o.n_ctx / 2;
  const int n_batch = std::min(o.n_batch, o.n_ctx);
  std::vector<float> logits;
  for (int start = 0; start < o.n_ctx; start += n_batch) {
    Batch b;
    for (int i = start; i < std::min(o.n_ctx, start + n_batch); ++i)
      b.Add(i == 0 && o.add_bos && o.bos_id >= 0 ? o.bos_id : chunk[i], i, 0, i >= first);
    DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(b, cache, pool));
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  return logits;
}

Status CheckOptions(const Model& model, const PerplexityOptions& o) {
  if (o.n_ctx < 4) return InvalidArgument("perplexity: a context of {} tokens is too short (at least 4)", o.n_ctx);
  if (o.n_batch < 1) return InvalidArgument("perplexity: batch size {} must be positive", o.n_batch);
  return KvCache::Supports(model.config(), o.cache_type);
}

}  // namespace

std::pair<double, double> KlDivergenceResult::MeanAndError(double sum, double sum2, int64_t count) {
  if (count < 1) return {0.0, 0.0};
  const double f = sum / count;
  double df = sum2 / count - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / (count - 1)) : 0.0;
  return {f, df};
}

float Percentile(const std::vector<float>& values, float fraction) {
  if (values.empty()) return 0.0f;
  if (fraction <= 0) return values.front();
  if (fraction >= 1) return values.back();
  float p = fraction * (values.size() - 1);
  const size_t ip = static_cast<size_t>(p);
  p -= ip;
  return (1 - p) * values[ip] + p * values[std::min(ip + 1, values.size() - 1)];
}

Result<LogitsFileHeader> ReadLogitsHeader(std::ifstream& in, const std::string& path) {
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "_logits_", 8) != 0)
    return InvalidArgument("perplexity: {} is not a llama.cpp logits file (no '_logits_' magic)", path);
  LogitsFileHeader h;
  if (!in.read(reinterpret_cast<char*>(&h.n_ctx), 4) || !in.read(reinterpret_cast<char*>(&h.n_vocab), 4) ||
      !in.read(reinterpret_cast<char*>(&h.n_chunk), 4))
    return DataLoss("perplexity: {}: the header is truncated", path);
  if (h.n_ctx < 4 || h.n_ctx > (1 << 20) || h.n_vocab < 2 || h.n_vocab > (1 << 24) || h.n_chunk < 1 ||
      h.n_chunk > (1 << 20))
    return InvalidArgument("perplexity: {}: implausible header (n_ctx {}, n_vocab {}, n_chunk {})", path, h.n_ctx,
                           h.n_vocab, h.n_chunk);
  h.tokens.resize(static_cast<size_t>(h.n_ctx) * h.n_chunk);
  if (!in.read(reinterpret_cast<char*>(h.tokens.data()), h.tokens.size() * sizeof(int32_t)))
    return DataLoss("perplexity: {}: the {} evaluation tokens are truncated", path, h.tokens.size());
  return h;
}

Result<PerplexityResult> Perplexity(Model& model, ThreadPool& pool, std::vector<int32_t> tokens,
                                    const PerplexityOptions& o, const std::string& logits_out,
                                    const ChunkProgress& progress) {
  DSPARK_TRY(CheckOptions(model, o));
  if (static_cast<int64_t>(tokens.size()) < 2 * int64_t{o.n_ctx})
    return InvalidArgument("perplexity: the text gives {} tokens; a context of {} needs at least {}", tokens.size(),
                           o.n_ctx, 2 * o.n_ctx);
  const int n_vocab = model.config().n_vocab;
  const int n_chunk_max = static_cast<int>(tokens.size() / o.n_ctx);
  const int n_chunk = o.n_chunks < 0 ? n_chunk_max : std::min(o.n_chunks, n_chunk_max);
  std::ofstream out;
  LogitsFileHeader header{o.n_ctx, n_vocab, n_chunk, {}};
  std::vector<uint16_t> rows;
  if (!logits_out.empty()) {
    out.open(logits_out, std::ios::binary);
    if (!out) return InvalidArgument("perplexity: cannot write {}", logits_out);
    out.write("_logits_", 8);
    for (int32_t v : {header.n_ctx, header.n_vocab, header.n_chunk}) out.write(reinterpret_cast<const char*>(&v), 4);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(n_chunk) * o.n_ctx * 4);
    rows.resize(static_cast<size_t>(header.RowsPerChunk()) * header.RowValues());
  }
  KvCache cache(model.config(), 1, o.n_ctx, o.cache_type);
  PerplexityResult r;
  r.n_chunk = n_chunk;
  double nll = 0, nll2 = 0;
  const int first = o.n_ctx / 2;
  for (int c = 0; c < n_chunk; ++c) {
    const int32_t* chunk = tokens.data() + static_cast<size_t>(c) * o.n_ctx;
    DSPARK_ASSIGN_OR_RETURN(std::vector<float> logits, ScoredLogits(model, cache, pool, chunk, o));
    for (int i = 0; i < o.n_ctx - 1 - first; ++i) {
      const float* row = logits.data() + static_cast<size_t>(i) * n_vocab;
      const int tok = chunk[first + i + 1];
      const double v = out.is_open() ? QuantisedLogProbs(row, n_vocab, rows.data() + static_cast<size_t>(i) * header.RowValues(), tok)
                                     : Nll(row, n_vocab, tok);
      nll += v;
      nll2 += v * v;
    }
    if (out.is_open()) out.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size()) * 2);
    r.count += o.n_ctx - 1 - first;
    r.running.push_back(std::exp(nll / r.count));
    if (progress) progress(c + 1, n_chunk);
  }
  if (out.is_open() && !out.flush()) return DataLoss("perplexity: writing {} failed", logits_out);
  const double mean = nll / r.count;
  r.ppl = std::exp(mean);
  const double var = nll2 / r.count - mean * mean;
  r.ppl_error = var > 0 ? std::sqrt(var / (r.count - 1)) * r.ppl : 0.0;
  return r;
}

Result<KlDivergenceResult> KlDivergence(Model& model, ThreadPool& pool, const std::string& base_path,
                                        const PerplexityOptions& options, const ChunkProgress& progress) {
  std::ifstream in(base_path, std::ios::binary);
  if (!in) return NotFound("perplexity: cannot open the logits file {}", base_path);
  DSPARK_ASSIGN_OR_RETURN(LogitsFileHeader h, ReadLogitsHeader(in, base_path));
  const int n_vocab = model.config().n_vocab;
  if (h.n_vocab != n_vocab)
    return InvalidArgument("perplexity: {} holds a vocabulary of {} tokens, the model has {}", base_path, h.n_vocab,
                           n_vocab);
  PerplexityOptions o = options;
  o.n_ctx = h.n_ctx;  // the base's chunks, as llama.cpp reads them
  DSPARK_TRY(CheckOptions(model, o));
  for (int32_t t : h.tokens)
    if (t < 0 || t >= n_vocab) return InvalidArgument("perplexity: {} holds token id {} outside the vocabulary", base_path, t);
  KvCache cache(model.config(), 1, o.n_ctx, o.cache_type);
  std::vector<uint16_t> rows(static_cast<size_t>(h.RowsPerChunk()) * h.RowValues());
  KlDivergenceResult r;
  const int first = o.n_ctx / 2;
  for (int c = 0; c < h.n_chunk; ++c) {
    if (!in.read(reinterpret_cast<char*>(rows.data()), static_cast<std::streamsize>(rows.size()) * 2))
      return DataLoss("perplexity: {}: the log-probabilities of chunk {} are truncated", base_path, c + 1);
    const int32_t* chunk = h.tokens.data() + static_cast<size_t>(c) * o.n_ctx;
    DSPARK_ASSIGN_OR_RETURN(std::vector<float> logits, ScoredLogits(model, cache, pool, chunk, o));
    for (int i = 0; i < h.RowsPerChunk(); ++i)
      CompareRow(logits.data() + static_cast<size_t>(i) * n_vocab, n_vocab,
                 rows.data() + static_cast<size_t>(i) * h.RowValues(), chunk[first + i + 1], r);
    if (progress) progress(c + 1, h.n_chunk);
  }
  return r;
}

}  // namespace dspark
