// `dspark perplexity`: llama-perplexity's perplexity and KL-divergence modes (eval/perplexity.h),
// with its flags and its output, so the numbers of the two engines and of two quantisations of
// one model compare directly:
//   dspark perplexity -m M.gguf -f text.txt [-c 512] [--chunks N]          PPL +/- error
//   dspark perplexity -m BASE.gguf -f text.txt --kl-divergence-base base.kld  ... and save its logits
//   dspark perplexity -m Q.gguf --kl-divergence-base base.kld --kl-divergence   KL divergence to the base
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "eval/perplexity.h"
#include "util/progress.h"

namespace dspark::cli {

namespace {

struct PerplexityFlags {
  std::string model, file, kld_base;
  bool kld = false;
  int n_ctx = 512, n_batch = 2048, n_chunks = -1, threads = 0;
  DType cache_type = DType::kF16;
};

void PrintKlDivergence(const KlDivergenceResult& r) {
  using R = KlDivergenceResult;
  if (r.count < 100) {
    std::printf("(%lld scored tokens: too few for statistics)\n", static_cast<long long>(r.count));
    return;
  }
  const auto log_ppl = R::MeanAndError(r.sum_nll, r.sum_nll2, r.count);
  const auto log_ppl_base = R::MeanAndError(r.sum_nll_base, r.sum_nll_base2, r.count);
  const double cov = (r.sum_nll_nll_base / r.count - (r.sum_nll / r.count) * (r.sum_nll_base / r.count)) / (r.count - 1);
  const double ppl = std::exp(log_ppl.first), ppl_base = std::exp(log_ppl_base.first);
  const double ratio = log_ppl.first - log_ppl_base.first;
  const double ratio_err = std::sqrt(log_ppl.second * log_ppl.second + log_ppl_base.second * log_ppl_base.second - 2 * cov);
  std::printf("====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl * log_ppl.second);
  std::printf("Mean PPL(base)                : %10.6f ± %10.6f\n", ppl_base, ppl_base * log_ppl_base.second);
  std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * cov / (log_ppl.second * log_ppl_base.second));
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", ratio, ratio_err);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n\n", std::exp(ratio), std::exp(ratio) * ratio_err);

  std::vector<float> kld = r.kld_values, dp = r.p_diff_values;
  std::sort(kld.begin(), kld.end());
  std::sort(dp.begin(), dp.end());
  const auto kl = R::MeanAndError(r.sum_kld, r.sum_kld2, r.count);
  std::printf("====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f ± %10.6f\n", kl.first, kl.second);
  std::printf("Maximum KLD: %10.6f\n", kld.back());
  for (float f : {0.999f, 0.99f, 0.95f, 0.90f}) std::printf("%4.1f%%   KLD: %10.6f\n", 100 * f, Percentile(kld, f));
  std::printf("Median  KLD: %10.6f\n", Percentile(kld, 0.5f));
  for (float f : {0.10f, 0.05f, 0.01f, 0.001f}) std::printf("%4.1f%%   KLD: %10.6f\n", 100 * f, Percentile(kld, f));
  std::printf("Minimum KLD: %10.6f\n\n", kld.front());

  const auto p = R::MeanAndError(r.sum_p_diff, r.sum_p_diff2, r.count);
  const auto mse = R::MeanAndError(r.sum_p_diff2, r.sum_p_diff4, r.count);
  const double rms = std::sqrt(mse.first);
  std::printf("====== Token probability statistics ======\n");
  std::printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * p.first, 100 * p.second);
  std::printf("Maximum Δp: %6.3f%%\n", 100.0 * dp.back());
  std::printf("99.0%%   Δp: %6.3f%%\n", 100.0 * Percentile(dp, 0.99f));
  std::printf("Median  Δp: %6.3f%%\n", 100.0 * Percentile(dp, 0.5f));
  std::printf(" 1.0%%   Δp: %6.3f%%\n", 100.0 * Percentile(dp, 0.01f));
  std::printf("Minimum Δp: %6.3f%%\n", 100.0 * dp.front());
  std::printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * rms, rms > 0 ? 100 * 0.5 / rms * mse.second : 0.0);
  const double top = static_cast<double>(r.n_same_top) / r.count;
  std::printf("Same top p: %6.3f ± %5.3f %%\n", 100 * top, 100 * std::sqrt(top * (1 - top) / (r.count - 1)));
}

int RunPerplexity(const PerplexityFlags& f) {
  if (f.kld && f.kld_base.empty())
    return Fail(InvalidArgument("perplexity: --kl-divergence compares against --kl-divergence-base FILE"));
  if (!f.kld && f.file.empty()) return Fail(InvalidArgument("perplexity: give the text with -f FILE"));
  auto loaded = LoadModelAndTokenizer(f.model);
  if (!loaded.ok()) return Fail(loaded.status());
  Model& model = *loaded->model;
  const Tokenizer& tok = *loaded->tokenizer;
  ThreadPool pool(ThreadCount(f.threads));
  PerplexityOptions o;
  o.n_ctx = f.n_ctx;
  o.n_batch = f.n_batch;
  o.n_chunks = f.n_chunks;
  o.cache_type = f.cache_type;
  o.add_bos = tok.add_bos();
  o.bos_id = tok.bos_id();
  ProgressBar bar(f.kld ? "kl-divergence" : "perplexity");
  const auto progress = [&](int done, int total) { bar.Update(done, total); };
  if (f.kld) {
    auto r = KlDivergence(model, pool, f.kld_base, o, progress);
    bar.Finish();
    if (!r.ok()) return Fail(r.status());
    PrintKlDivergence(*r);
    return 0;
  }
  auto text = ReadTextFile(f.file, "text");
  if (!text.ok()) return Fail(text.status());
  EncodeOptions eo;
  eo.add_bos = tok.add_bos();
  std::vector<int32_t> tokens = tok.Encode(*text, eo);
  std::fprintf(stderr, "dspark perplexity: %s, %zu tokens, n_ctx %d, %d threads%s\n", f.model.c_str(), tokens.size(),
               o.n_ctx, pool.num_threads(), f.kld_base.empty() ? "" : (", saving logits to " + f.kld_base).c_str());
  auto r = Perplexity(model, pool, std::move(tokens), o, f.kld_base, progress);
  bar.Finish();
  if (!r.ok()) return Fail(r.status());
  for (size_t i = 0; i < r->running.size(); ++i) std::printf("[%zu]%.4f,", i + 1, r->running[i]);
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r->ppl, r->ppl_error);
  return 0;
}

}  // namespace

Runner RegisterPerplexity(CLI::App& app) {
  auto f = std::make_shared<PerplexityFlags>();
  CLI::App* sub = app.add_subcommand("perplexity", "Perplexity and KL divergence, as llama-perplexity computes them");
  sub->add_option("-m,--model", f->model, "Model GGUF")->required();
  sub->add_option("-f,--file", f->file, "Text to evaluate (UTF-8)");
  sub->add_option("-c,--ctx-size", f->n_ctx, "Tokens per chunk; the second half of each is scored")->capture_default_str();
  sub->add_option("-b,--batch-size", f->n_batch, "Rows per forward pass")->capture_default_str();
  sub->add_option("--chunks", f->n_chunks, "At most this many chunks (-1: all)")->capture_default_str();
  sub->add_option("--kl-divergence-base", f->kld_base,
                  "llama.cpp's logits file: written (perplexity mode) or read (with --kl-divergence)");
  sub->add_flag("--kl-divergence", f->kld, "KL divergence of this model's distributions from the base file's");
  sub->add_option("-t,--threads", f->threads, "Threads (default: physical cores)");
  AddCacheTypeOption(sub, &f->cache_type);
  return [f] { return RunPerplexity(*f); };
}

}  // namespace dspark::cli
