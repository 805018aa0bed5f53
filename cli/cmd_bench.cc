// `dspark bench --plain`: prefill, decode and verify-k throughput of a target model, with the
// achieved fraction of memory bandwidth for decode measured against a copy benchmark in the
// same run. Speculative sweeps (--spec, cmd_bench_spec.h) and the load benchmark (--serve,
// bench_serve.h) live in their own files.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_serve.h"
#include "cli/cmd_bench_spec.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "kernels/cpu_target.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "util/memory.h"

namespace dspark::cli {

namespace {

struct BenchFlags {
  std::string model;
  bool plain = false;
  int threads = 0;
  int reps = 3;
  int n_prefill = 512;
  int n_decode = 128;
  bool json = false;
  bool no_repack = false;
  DType cache_type = DType::kF16;
  bool profile = false;
};

struct Summary {
  double median = 0, min = 0, max = 0;
};

Summary Summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Summary s;
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

double NowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Bytes moved per second (read + write) by a multi-threaded memcpy of a buffer far larger than
// the caches: the practical ceiling for streaming weights.
double CopyBandwidth(ThreadPool& pool) {
  const size_t n = size_t{512} << 20;
  std::vector<uint8_t> a(n, 1), b(n, 0);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = NowMs();
    pool.ParallelRange(static_cast<int64_t>(n), 1 << 22, [&](int64_t s, int64_t e, int) {
      std::memcpy(b.data() + s, a.data() + s, e - s);
    });
    const double ms = NowMs() - t0;
    best = std::max(best, 2.0 * n / (ms / 1000.0));
  }
  return best;
}

int RunPlainBench(const BenchFlags& f) {
  auto model_or = Model::Load(f.model, ModelOptions{!f.no_repack});
  if (!model_or.ok()) return Fail(model_or.status());
  Model& model = **model_or;
  const ModelConfig& c = model.config();
  ThreadPool pool(ThreadCount(f.threads));
  const int n_ctx = f.n_prefill + f.n_decode + 64;
  if (Status ok = KvCache::Supports(c, f.cache_type); !ok.ok()) return Fail(ok);
  KvCache cache(c, 1, n_ctx, f.cache_type);
  auto token = [&](int i) { return static_cast<int32_t>((i * 7919 + 13) % c.n_vocab); };
  // --profile: time by phase of the decode passes and of each verify-k pass (ForwardProfile).
  ForwardProfile decode_profile;
  std::map<int, ForwardProfile> verify_profile;
  // Mixture-of-experts targets: the distinct experts each verify-k pass read, summed over blocks.
  std::map<int, int64_t> experts_read;
  auto run = [&](int n_rows, int start, bool all_logits, ForwardProfile* profile = nullptr,
                 int64_t* experts = nullptr) -> Status {
    Batch b;
    for (int i = 0; i < n_rows; ++i) b.Add(token(start + i), start + i, 0, all_logits || i == n_rows - 1);
    ForwardOptions options;
    if (f.profile) options.profile = profile;
    auto out = model.Forward(b, cache, pool, options);
    if (!out.ok()) return out.status();
    if (experts != nullptr) *experts += out->experts_read;
    return Status::Ok();
  };

  std::string weights;
  if (model.PackedBytes() > 0) weights += fmt::format("{:.0f} MiB of weights repacked", model.PackedBytes() / 1048576.0);
  if (model.CopiedBytes() > 0)
    weights += fmt::format("{}{:.0f} MiB copied in row layout", weights.empty() ? "" : ", ", model.CopiedBytes() / 1048576.0);
  weights = weights.empty() ? "row-layout weights read from the file"
                            : weights + (model.WeightsOnHugePages() ? ", on huge pages" : "");
  const bool has_bf16 = std::any_of(model.file().tensors().begin(), model.file().tensors().end(),
                                    [](const auto& t) { return t.type == DType::kBF16 && t.ne.size() >= 2; });
  if (has_bf16) weights += fmt::format(", BF16 multiplied with {}", ops::Bf16MatMulKernel());
  // Per token: every layer's keys and values (MLA: the latent and the RoPE part).
  std::fprintf(stderr,
               "dspark bench: %s, %s, %d threads, %s kernels, %s; KV cache %s, %.1f MiB for %d cells (%.0f bytes "
               "per token)\n",
               f.model.c_str(), c.arch.c_str(), pool.num_threads(), kernels::CpuTargetName().c_str(), weights.c_str(),
               std::string(DTypeName(f.cache_type)).c_str(), cache.bytes() / 1048576.0, n_ctx,
               static_cast<double>(cache.bytes()) / n_ctx);
  if (c.moe.enabled())
    std::fprintf(stderr, "dspark bench: %d experts, %d used per token, %d wide\n", c.moe.n_expert,
                 c.moe.n_expert_used, c.moe.n_ff_exp);
  const double copy_bw = CopyBandwidth(pool);

  // Warm-up: touches every weight page once so the first timed run does not pay page faults.
  Status s = run(8, 0, false);
  if (!s.ok()) return Fail(s);
  const uint64_t resident = ResidentBytes();
  std::fprintf(stderr, "dspark bench: resident memory after load and warm-up: %.0f MiB\n", resident / 1048576.0);

  std::vector<double> prefill, decode;
  std::map<int, std::vector<double>> verify;
  constexpr int kVerifyRuns = 8;
  // Every k a draft of up to 8 tokens verifies (anchor + draft), then wider blocks and token trees.
  const int ks[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32};
  for (int rep = 0; rep < f.reps; ++rep) {
    cache.Clear(0);
    double t0 = NowMs();
    if (!(s = run(f.n_prefill, 0, false)).ok()) return Fail(s);
    prefill.push_back(f.n_prefill * 1000.0 / (NowMs() - t0));

    t0 = NowMs();
    for (int i = 0; i < f.n_decode; ++i)
      if (!(s = run(1, f.n_prefill + i, true, &decode_profile)).ok()) return Fail(s);
    decode.push_back(f.n_decode * 1000.0 / (NowMs() - t0));

    // Verify-k: k rows with logits for each, on top of the prompt, then roll back; the mean of
    // kVerifyRuns passes (one pass is under a millisecond on small models: a single one is noise).
    for (int k : ks) {
      const int base = cache.Length(0);
      t0 = NowMs();
      for (int i = 0; i < kVerifyRuns; ++i) {
        if (!(s = run(k, base, true, &verify_profile[k], &experts_read[k])).ok()) return Fail(s);
        (void)cache.Truncate(0, base);
      }
      verify[k].push_back((NowMs() - t0) / kVerifyRuns);
    }
  }
  const Summary pf = Summarise(prefill), dc = Summarise(decode);
  const double weight_bytes = static_cast<double>(model.WeightBytesPerToken());
  const double bw_fraction = dc.median * weight_bytes / copy_bw;
  nlohmann::json j;
  j["model"] = f.model;
  j["threads"] = pool.num_threads();
  j["cpu_target"] = kernels::CpuTargetName();
  j["repacked_bytes"] = model.PackedBytes();
  j["row_layout_copied_bytes"] = model.CopiedBytes();
  j["weights_on_huge_pages"] = model.WeightsOnHugePages();
  if (has_bf16) j["bf16_kernel"] = ops::Bf16MatMulKernel();
  j["cache_type"] = DTypeName(f.cache_type);
  j["kv_cache_bytes"] = cache.bytes();
  j["kv_cache_bytes_per_token"] = static_cast<double>(cache.bytes()) / n_ctx;
  j["prefill_tokens"] = f.n_prefill;
  j["prefill_tok_s"] = pf.median;
  j["prefill_tok_s_min"] = pf.min;
  j["prefill_tok_s_max"] = pf.max;
  j["decode_tokens"] = f.n_decode;
  j["decode_tok_s"] = dc.median;
  j["decode_tok_s_min"] = dc.min;
  j["decode_tok_s_max"] = dc.max;
  j["weight_bytes_per_token"] = weight_bytes;
  j["copy_bandwidth_gb_s"] = copy_bw / 1e9;
  j["decode_bandwidth_fraction"] = bw_fraction;
  nlohmann::json vj = nlohmann::json::object();
  for (int k : ks) vj[std::to_string(k)] = Summarise(verify[k]).median;
  j["verify_ms"] = vj;
  j["resident_bytes"] = resident;
  // Mean distinct experts per mixture block (leading dense blocks read none) of one verify-k pass
  // (k rows choosing k * n_used at most).
  const auto experts_per_block = [&](int k) {
    const int64_t passes = int64_t{f.reps} * kVerifyRuns;
    const int moe_blocks = std::max(1, c.n_layer - c.moe.n_leading_dense);
    return static_cast<double>(experts_read[k]) / (static_cast<double>(passes) * moe_blocks);
  };
  if (c.moe.enabled()) {
    nlohmann::json ej = nlohmann::json::object();
    for (int k : ks) ej[std::to_string(k)] = experts_per_block(k);
    j["experts_per_block"] = ej;
  }
  // Per pass, in microseconds: decode (one row at the decode depths) and every verify k.
  const auto phase_us = [](const ForwardProfile& p) {
    nlohmann::json pj = nlohmann::json::object();
    for (int ph = 0; ph < ForwardProfile::kNumPhases; ++ph)
      pj[ForwardProfile::Name(ph)] = p.passes > 0 ? 1000.0 * p.ms[ph] / p.passes : 0.0;
    return pj;
  };
  if (f.profile) {
    j["profile_us"]["decode"] = phase_us(decode_profile);
    for (int k : ks) j["profile_us"]["verify_" + std::to_string(k)] = phase_us(verify_profile[k]);
  }
  if (f.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("prefill (%d tokens): %8.1f tok/s  (min %.1f, max %.1f)\n", f.n_prefill, pf.median, pf.min, pf.max);
  std::printf("decode  (%d tokens): %8.1f tok/s  (min %.1f, max %.1f)\n", f.n_decode, dc.median, dc.min, dc.max);
  std::printf("decode bandwidth:   %.2f GB/s of weights = %.0f%% of copy bandwidth %.2f GB/s (read+write)\n",
              dc.median * weight_bytes / 1e9, 100 * bw_fraction, copy_bw / 1e9);
  const double one = Summarise(verify[1]).median;
  for (int k : ks) {
    const double ms = Summarise(verify[k]).median;
    if (c.moe.enabled()) {
      std::printf("verify k=%-2d: %8.2f ms  (%.2fx one position; %5.1f of %d experts per block, %.2fx one position's)\n",
                  k, ms, ms / one, experts_per_block(k), c.moe.n_expert, experts_per_block(k) / experts_per_block(1));
    } else {
      std::printf("verify k=%-2d: %8.2f ms  (%.2fx one position)\n", k, ms, ms / one);
    }
  }
  if (f.profile) {
    // Microseconds per pass by phase; the last column is what each verification row adds.
    const int cols[] = {1, 2, 4, 8, 9, 16};
    std::printf("\nper pass, us   %9s", "decode");
    for (int k : cols) std::printf(" %8s", fmt::format("k={}", k).c_str());
    std::printf(" %12s\n", "+row (1->9)");
    const auto us = [](const ForwardProfile& p, int ph) {
      if (p.passes == 0) return 0.0;
      return 1000.0 * (ph < 0 ? p.TotalMs() : p.ms[ph]) / p.passes;
    };
    for (int ph = 0; ph <= ForwardProfile::kNumPhases; ++ph) {
      const int phase = ph < ForwardProfile::kNumPhases ? ph : -1;  // the last line: the total
      std::printf("%-14s %9.1f", phase < 0 ? "total" : ForwardProfile::Name(phase), us(decode_profile, phase));
      for (int k : cols) std::printf(" %8.1f", us(verify_profile[k], phase));
      std::printf(" %12.1f\n", (us(verify_profile[9], phase) - us(verify_profile[1], phase)) / 8);
    }
  }
  return 0;
}

}  // namespace

Runner RegisterBench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  auto sf = std::make_shared<SpecBenchFlags>();
  auto spec = std::make_shared<bool>(false);
  f->model = DefaultModelPath();
  CLI::App* sub = app.add_subcommand("bench", "Benchmark plain decoding (and, with other modes, speculation)");
  sub->add_flag("--plain", f->plain, "Prefill / decode / verify-k throughput of the target alone");
  sub->add_option("-m,--model", f->model, "Target model GGUF")->capture_default_str();
  sub->add_option("-t,--threads", f->threads, "Threads (default: physical cores)");
  sub->add_option("-r,--reps", f->reps, "Repetitions (median, min, max reported; --spec: runs of each prompt per setting, median counts)")->capture_default_str()->check(CLI::Range(1, 100));
  sub->add_option("--prefill", f->n_prefill, "Prefill length")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  sub->add_option("--decode", f->n_decode, "Decode length")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  sub->add_flag("--json", f->json, "Print one JSON object (--plain)");
  sub->add_flag("--profile", f->profile,
                "With --plain: time by phase (matmuls, attention, ...) of decode and verify-k passes");
  sub->add_flag("--no-repack", f->no_repack, kNoRepackHelp);
  AddCacheTypeOption(sub, &f->cache_type);
  // Speculative sweep (--spec).
  sub->add_flag("--spec", *spec, "Plain decoding and a grid of speculative settings on the same prompts");
  AddDrafterFlags(sub, &sf->drafter, "draft-simple | draft-dspark | draft-dflash | draft-eagle3 | draft-mtp | ngram | synthetic", /*synthetic=*/true);
  sub->add_option("--prompts", sf->prompts_file, "JSONL file of {\"prompt\": ...} objects");
  sub->add_option("--sweep", sf->sweeps, "Grid axis: n-max=3,5,7,9 | p-min=0,0.5 | n-min=0,2 | adaptive=0,1 | cost=0,1 | branches=0,1,2 | branch-tail=0,3 (repeatable)");
  sub->add_option("--spec-draft-n-max", sf->schedule.n_max, "Draft cap when not swept")->capture_default_str();
  sub->add_option("--spec-draft-p-min", sf->schedule.p_min, "Confidence cut when not swept")->capture_default_str();
  sub->add_flag("--spec-adaptive", sf->schedule.adaptive, "Adaptive draft length when not swept");
  sub->add_option("--spec-branches", sf->schedule.branches, "Token-tree alternatives per draft token when not swept")->capture_default_str()->check(CLI::Range(0, 8));
  sub->add_option("--spec-branch-tail", sf->schedule.branch_tail, "Token-tree tokens drafted after each alternative when not swept")->capture_default_str()->check(CLI::Range(0, 16));
  sub->add_option("--temp", sf->temp, "Temperature (--spec)")->capture_default_str();
  sub->add_option("--top-p", sf->top_p, "Top-p with --temp (--spec)")->capture_default_str()->check(CLI::Range(0.001f, 1.0f));
  sub->add_option("-s,--seed", sf->seed, "Seed (--spec)")->capture_default_str();
  sub->add_option("-n,--n-predict", sf->n_predict, "Tokens per prompt (--spec)")->capture_default_str();
  sub->add_option("--max-prompts", sf->max_prompts, "Use at most this many prompts (--spec)")->capture_default_str();
  sub->add_option("-c,--ctx-size", sf->ctx_size, "Context size (--spec)");
  sub->add_option("-o,--out", sf->out, "Output prefix for .json, .csv and .svg (--spec)")->capture_default_str();
  auto serve = AddServeBenchFlags(sub);
  return [f, sf, spec, serve] {
    if (ServeBenchRequested(*serve)) return RunServeBench(*serve);
    if (*spec) {
      if (sf->prompts_file.empty()) return Fail(InvalidArgument("bench --spec needs --prompts FILE.jsonl"));
      sf->model = f->model;
      sf->model_options.repack = !f->no_repack;
      sf->drafter.repack = !f->no_repack;
      sf->threads = f->threads;
      sf->reps = f->reps;
      sf->cache_type = f->cache_type;
      return RunSpecBench(*sf);
    }
    if (!f->plain) return Fail(InvalidArgument("bench: choose a mode (--plain, --spec or --serve)"));
    return RunPlainBench(*f);
  };
}

}  // namespace dspark::cli
