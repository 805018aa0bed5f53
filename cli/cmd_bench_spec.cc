#include "cli/cmd_bench_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "speculative/engine.h"
#include "speculative/speculation.h"
#include "util/progress.h"
#include "util/svg_plot.h"

namespace dspark::cli {

namespace {

Result<std::vector<std::string>> LoadPrompts(const std::string& path, int max_prompts) {
  std::ifstream in(path);
  if (!in) return NotFound("bench: cannot open prompts file '{}'", path);
  std::vector<std::string> prompts;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line) && static_cast<int>(prompts.size()) < max_prompts) {
    ++line_no;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
      return InvalidArgument("bench: {}:{}: expected a JSON object with a string field \"prompt\"", path, line_no);
    prompts.push_back(j["prompt"].get<std::string>());
  }
  if (prompts.empty()) return InvalidArgument("bench: '{}' holds no prompts", path);
  return prompts;
}

struct Axis {
  std::string key;
  std::vector<double> values;
};

Result<std::vector<Axis>> ParseSweeps(const std::vector<std::string>& sweeps) {
  std::vector<Axis> axes;
  for (const std::string& s : sweeps) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos) return InvalidArgument("bench: --sweep '{}' must look like key=v1,v2,...", s);
    Axis a;
    a.key = s.substr(0, eq);
    if (a.key != "n-max" && a.key != "p-min" && a.key != "n-min" && a.key != "adaptive" && a.key != "cost" &&
        a.key != "branches" && a.key != "branch-tail")
      return InvalidArgument("bench: unknown sweep key '{}' (n-max, p-min, n-min, adaptive, cost, branches, branch-tail)", a.key);
    std::stringstream ss(s.substr(eq + 1));
    std::string item;
    while (std::getline(ss, item, ',')) {
      char* end = nullptr;
      const double v = std::strtod(item.c_str(), &end);
      if (item.empty() || *end != '\0') return InvalidArgument("bench: --sweep {}: '{}' is not a number", a.key, item);
      a.values.push_back(v);
    }
    if (a.values.empty()) return InvalidArgument("bench: --sweep {} has no values", a.key);
    axes.push_back(std::move(a));
  }
  return axes;
}

struct Totals {
  int64_t generated = 0;
  double decode_ms = 0;
  SpecStats spec;  // draft and acceptance counts summed over the prompts
  int identical = 0;
  std::vector<double> prompt_tok_s;  // per prompt, in prompt order
  nlohmann::json prompt_stats = nlohmann::json::array();  // per prompt: the median run's statistics
  double tok_s() const { return decode_ms > 0 ? generated * 1000.0 / decode_ms : 0; }
  // The smallest per-prompt speed-up over `plain` (same prompts, same order): the "never slower
  // than plain on any prompt" figure.
  double WorstSpeedup(const Totals& plain) const {
    double worst = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < prompt_tok_s.size() && i < plain.prompt_tok_s.size(); ++i)
      if (plain.prompt_tok_s[i] > 0) worst = std::min(worst, prompt_tok_s[i] / plain.prompt_tok_s[i]);
    return std::isinf(worst) ? 0.0 : worst;
  }
  double tau() const { return spec.tau(); }
  void Add(const GenerateResult& r) {
    generated += r.stats.generated_tokens;
    decode_ms += r.stats.decode_ms;
    spec.Merge(r.stats);
    prompt_tok_s.push_back(r.stats.decode_ms > 0 ? r.stats.generated_tokens * 1000.0 / r.stats.decode_ms : 0);
    prompt_stats.push_back(r.stats.ToJson());
  }
};

}  // namespace

int RunSpecBench(const SpecBenchFlags& f) {
  auto loaded = LoadModelAndTokenizer(f.model, f.model_options);
  if (!loaded.ok()) return Fail(loaded.status());
  auto prompts = LoadPrompts(f.prompts_file, f.max_prompts);
  if (!prompts.ok()) return Fail(prompts.status());
  auto axes = ParseSweeps(f.sweeps);
  if (!axes.ok()) return Fail(axes.status());
  Model& model = *loaded->model;
  const Tokenizer& tok = *loaded->tokenizer;
  ThreadPool pool(ThreadCount(f.threads));
  const int n_ctx = ContextSize(f.ctx_size, model);
  GenerateOptions opt;
  opt.max_new_tokens = f.n_predict;
  opt.sampling.temperature = f.temp;
  opt.sampling.top_p = f.top_p;
  opt.sampling.seed = f.seed;
  opt.ignore_eos = true;  // equal work per prompt for every setting

  // The grid: the cartesian product of the sweep axes.
  std::vector<std::map<std::string, double>> grid(1);
  for (const Axis& a : *axes) {
    std::vector<std::map<std::string, double>> next;
    for (const auto& g : grid)
      for (double v : a.values) {
        auto h = g;
        h[a.key] = v;
        next.push_back(std::move(h));
      }
    grid = std::move(next);
  }

  // Per-setting speculation: the drafter and the resolved schedule (a synthetic drafter is made
  // per prompt: it replays plain decoding's output).
  std::vector<SpeculationOptions> settings;
  std::vector<Speculation> built(grid.size());
  for (size_t gi = 0; gi < grid.size(); ++gi) {
    ScheduleOptions so = f.schedule;
    for (const auto& [k, v] : grid[gi]) {
      if (k == "n-max") so.n_max = static_cast<int>(v);
      if (k == "p-min") so.p_min = static_cast<float>(v);
      if (k == "n-min") so.n_min = static_cast<int>(v);
      if (k == "adaptive") so.adaptive = v != 0;
      if (k == "branches") so.branches = static_cast<int>(v);
      if (k == "branch-tail") so.branch_tail = static_cast<int>(v);
    }
    // cost=1: verify the prefix maximising expected tokens per ms; cost=0: the cut; no cost axis:
    // the library's default for this drafter (BuildSpeculation).
    SpeculationOptions spec_options{f.drafter, so, std::nullopt};
    if (auto it = grid[gi].find("cost"); it != grid[gi].end())
      spec_options.mode = it->second != 0 ? ScheduleMode::kCost : ScheduleMode::kCut;
    if (f.drafter.type != "synthetic") {
      auto spec = BuildSpeculation(spec_options, model, tok, pool, n_ctx);
      if (!spec.ok()) return Fail(spec.status());
      built[gi] = std::move(*spec);
    }
    settings.push_back(std::move(spec_options));
  }

  const int n_prompts = static_cast<int>(prompts->size());
  const int reps = std::max(1, f.reps);
  ProgressBar bar("bench --spec");
  const uint64_t total_runs = static_cast<uint64_t>(n_prompts) * (grid.size() + 1) * reps;
  uint64_t runs_done = 0;
  auto tick = [&] { bar.Update(++runs_done, total_runs); };

  // Round-robin: every repetition runs each prompt plainly and then under every setting, so a
  // prompt's runs are close together in time and a change of machine load hits all settings alike;
  // consecutive runs use different prompts, so no drafter cache carries a prompt to its next run.
  // Per prompt and setting the median decode time of the repetitions counts.
  if (Status ok = KvCache::Supports(model.config(), f.cache_type); !ok.ok()) return Fail(ok);
  SpeculativeEngine plain(model, tok, pool, n_ctx, nullptr, {}, f.cache_type);
  std::vector<std::vector<int32_t>> plain_ids(n_prompts), prompt_ids(n_prompts);
  for (int pi = 0; pi < n_prompts; ++pi) {
    EncodeOptions eo;
    eo.add_eos = false;
    prompt_ids[pi] = tok.Encode((*prompts)[pi], eo);
  }
  // results[row][prompt]: one GenerateResult per repetition; row 0 is plain decoding.
  std::vector<std::vector<std::vector<GenerateResult>>> results(
      grid.size() + 1, std::vector<std::vector<GenerateResult>>(n_prompts));
  for (int rep = 0; rep < reps; ++rep) {
    for (int pi = 0; pi < n_prompts; ++pi) {
      auto r = plain.Generate((*prompts)[pi], opt);
      if (!r.ok()) return Fail(r.status());
      if (rep == 0) plain_ids[pi] = r->ids;
      results[0][pi].push_back(std::move(*r));
      tick();
      for (size_t gi = 0; gi < grid.size(); ++gi) {
        Speculation own;
        const Speculation* spec = &built[gi];
        if (f.drafter.type == "synthetic") {
          SpeculationOptions so = settings[gi];
          std::vector<int32_t>& reference = so.drafter.synthetic_reference;
          reference = prompt_ids[pi];
          reference.insert(reference.end(), plain_ids[pi].begin(), plain_ids[pi].end());
          auto made = BuildSpeculation(std::move(so), model, tok, pool, n_ctx);
          if (!made.ok()) return Fail(made.status());
          own = std::move(*made);
          spec = &own;
        }
        SpeculativeEngine engine(model, tok, pool, n_ctx, spec->drafter.get(), spec->schedule, f.cache_type);
        auto sr = engine.Generate((*prompts)[pi], opt);
        if (!sr.ok()) return Fail(sr.status());
        results[gi + 1][pi].push_back(std::move(*sr));
        tick();
      }
    }
  }
  auto totals_of = [&](size_t row) {
    Totals t;
    for (int pi = 0; pi < n_prompts; ++pi) {
      std::vector<GenerateResult>& runs = results[row][pi];
      std::sort(runs.begin(), runs.end(), [](const GenerateResult& a, const GenerateResult& b) {
        return a.stats.decode_ms < b.stats.decode_ms;
      });
      const GenerateResult& median = runs[runs.size() / 2];
      t.Add(median);
      t.identical += std::all_of(runs.begin(), runs.end(), [&](const GenerateResult& g) { return g.ids == plain_ids[pi]; });
    }
    return t;
  };
  const Totals plain_totals = totals_of(0);
  std::vector<Totals> rows;
  for (size_t gi = 0; gi < grid.size(); ++gi) rows.push_back(totals_of(gi + 1));
  bar.Finish();

  // Report: table, JSON, CSV, SVG.
  auto name_of = [&](const std::map<std::string, double>& g) {
    std::string s;
    for (const auto& [k, v] : g) s += fmt::format("{}{}={:g}", s.empty() ? "" : " ", k, v);
    return s.empty() ? std::string("default") : s;
  };
  size_t best = 0;
  for (size_t gi = 1; gi < rows.size(); ++gi)
    if (rows[gi].tok_s() > rows[best].tok_s()) best = gi;
  std::printf("%-32s %10s %8s %8s %8s %8s %10s\n", "setting", "tok/s", "speedup", "worst", "tau", "accept",
              "identical");
  std::printf("%-32s %10.1f %8s %8s %8s %8s %10s\n", "plain", plain_totals.tok_s(), "1.00", "-", "-", "-", "-");
  nlohmann::json j;
  j["model"] = f.model;
  j["spec_type"] = f.drafter.type;
  j["prompts"] = n_prompts;
  j["tokens_per_prompt"] = f.n_predict;
  j["temperature"] = f.temp;
  j["top_p"] = f.top_p;
  j["plain_tokens_per_second"] = plain_totals.tok_s();
  j["plain_prompt_tokens_per_second"] = plain_totals.prompt_tok_s;
  // Per prompt, the statistics of the run that counted (the median): why a prompt won or lost.
  j["plain_prompt_stats"] = plain_totals.prompt_stats;
  std::ofstream csv(f.out + ".csv");
  csv << "setting,tokens_per_second,speedup,worst_prompt_speedup,tau,acceptance_rate,identical,prompts\n";
  csv << fmt::format("plain,{:.3f},1,1,,,,{}\n", plain_totals.tok_s(), n_prompts);
  Plot plot;
  plot.title = fmt::format("{} on {} prompts ({} tokens each, temp {:g}, top-p {:g})", f.drafter.type, n_prompts,
                           f.n_predict, f.temp, f.top_p);
  plot.x_label = "setting";
  plot.y_label = "tokens per second";
  plot.y2_label = "mean acceptance length tau";
  PlotSeries tps, taus, base;
  tps.name = "tok/s (speculative)";
  tps.color = "#1f77b4";
  taus.name = "tau";
  taus.color = "#2ca02c";
  base.name = "tok/s (plain)";
  base.color = "#7f7f7f";
  taus.secondary_axis = true;
  for (size_t gi = 0; gi < rows.size(); ++gi) {
    const Totals& t = rows[gi];
    const double speedup = plain_totals.tok_s() > 0 ? t.tok_s() / plain_totals.tok_s() : 0;
    const double acc = t.spec.acceptance_rate();
    const double worst = t.WorstSpeedup(plain_totals);
    const std::string name = name_of(grid[gi]);
    // Sampling: speculation keeps the distribution, not the sample (the draws differ), so equal
    // outputs are not expected and not reported.
    const bool greedy = opt.sampling.greedy();
    const std::string identical = greedy ? fmt::format("{}/{}", t.identical, n_prompts) : "n/a";
    std::printf("%-32s %10.1f %8.2f %8.2f %8.2f %8.2f %10s%s\n", name.c_str(), t.tok_s(), speedup, worst, t.tau(), acc,
                identical.c_str(), gi == best ? "  <- best" : "");
    j["settings"].push_back({{"setting", grid[gi]}, {"name", name}, {"tokens_per_second", t.tok_s()},
                             {"speedup", speedup}, {"worst_prompt_speedup", worst},
                             {"prompt_tokens_per_second", t.prompt_tok_s}, {"tau", t.tau()},
                             {"acceptance_rate", acc},
                             {"identical", greedy ? nlohmann::json(t.identical) : nlohmann::json(nullptr)},
                             {"drafted", t.spec.num_draft_tokens},
                             {"accepted", t.spec.num_accepted_tokens},
                             {"whole_drafts", t.spec.num_whole_drafts},
                             {"drafts", t.spec.num_drafts},
                             {"leaves", t.spec.num_leaf_tokens},
                             {"leaves_reached", t.spec.num_leaf_reached},
                             {"leaves_accepted", t.spec.num_leaf_accepted},
                             {"tail_tokens", t.spec.num_tail_tokens},
                             {"tail_accepted", t.spec.num_tail_accepted},
                             {"leaf_accepted_per_position", t.spec.leaf_accepted_per_pos},
                             {"tail_accepted_per_position", t.spec.tail_accepted_per_pos},
                             {"prompt_stats", t.prompt_stats}});
    csv << fmt::format("\"{}\",{:.3f},{:.4f},{:.4f},{:.4f},{:.4f},{},{}\n", name, t.tok_s(), speedup, worst, t.tau(),
                       acc, greedy ? std::to_string(t.identical) : std::string(), n_prompts);
    plot.x_categories.push_back(name);
    for (PlotSeries* s : {&tps, &taus, &base}) s->x.push_back(static_cast<double>(gi));
    tps.y.push_back(t.tok_s());
    taus.y.push_back(t.tau());
    base.y.push_back(plain_totals.tok_s());
  }
  // Acceptance per draft position: of the drafts that proposed a token i, the share whose token i
  // was kept (so the chain's first i+1 tokens were). Drafters compare here independent of the
  // lengths their schedules chose.
  std::printf("\nacceptance per draft position (kept / drafted)\n");
  for (size_t gi = 0; gi < rows.size(); ++gi) {
    const SpecStats& s = rows[gi].spec;
    const std::vector<double> kept = s.kept_per_position();
    std::string line;
    for (double k : kept) line += fmt::format(" {:.2f}", k);
    std::printf("%-32s%s\n", name_of(grid[gi]).c_str(), line.c_str());
    auto& row = j["settings"][gi];
    row["kept_per_position"] = kept;
    row["drafted_per_position"] = s.drafted_per_pos;
    row["accepted_per_position"] = s.accepted_per_pos;
  }
  j["best"] = name_of(grid[best]);
  plot.series = {base, tps, taus};
  plot.highlight_series = 1;
  plot.highlight_point = static_cast<int>(best);
  plot.highlight_caption = fmt::format("best {:.1f} tok/s", rows[best].tok_s());
  std::ofstream(f.out + ".json") << j.dump(2) << "\n";
  std::ofstream(f.out + ".svg") << plot.ToSvg();
  std::fprintf(stderr, "dspark: wrote %s.json, %s.csv, %s.svg\n", f.out.c_str(), f.out.c_str(), f.out.c_str());
  return 0;
}

}  // namespace dspark::cli
