// SpeculativeDecodingEngine of the module `dspark` (binding.h): Hugging Face-style parameters over
// the library's engine, drafters and speculation policy (speculative/engine.h, speculative/speculation.h);
// generate() on the calling thread, stream() through a TokenStream (stream.cc).
#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_target.h"
#include "speculative/drafters/factory.h"
#include "speculative/speculation.h"

#include "binding.h"

namespace dspark::python {
namespace {

// ---------------------------------------------------------------------------------------------
// Engine

// The draft type a file asks for (speculative/speculation.h DraftTypeOfFile).
std::string DraftTypeOf(const std::string& path) {
  CheckReadable(path);  // FileNotFoundError / PermissionError with the path, before the library opens it
  return Unwrap(DraftTypeOfFile(path));
}

struct CallOptions {
  std::optional<double> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

GenerateOptions MakeOptions(Core& core, int max_new_tokens, bool do_sample, const CallOptions& c) {
  if (max_new_tokens < 1) throw py::value_error("max_new_tokens must be >= 1, got " + std::to_string(max_new_tokens));
  GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  o.stop = c.stop;
  o.ignore_eos = c.ignore_eos;
  if (do_sample) {
    o.sampling = core.sampling;
    if (c.temperature) o.sampling.temperature = *c.temperature;
    if (c.top_p) o.sampling.top_p = *c.top_p;
    if (c.top_k) o.sampling.top_k = *c.top_k;
    if (c.min_p) o.sampling.min_p = *c.min_p;
    o.sampling.seed = c.seed ? *c.seed : core.NextSeed();
  } else {
    o.sampling = SamplingParams{};  // greedy: temperature 0
  }
  if (Status s = ValidateSamplingParams(o.sampling); !s.ok()) ThrowStatus(s);
  return o;
}

// max_length counts the prompt and the output, as Hugging Face's does: never more than max_length
// ids come back (the engine's context would hold one more: the last token needs no cache row). A
// prompt that leaves no room is the engine's error (ValueError).
void CapToContext(const Core& c, const std::vector<int32_t>& prompt, GenerateOptions& o) {
  const int room = c.max_length - static_cast<int>(prompt.size());
  if (room >= 1) o.max_new_tokens = std::min(o.max_new_tokens, room);
}

class Engine {
 public:
  Engine(const py::object& target_model, const py::object& draft_model, const py::object& tokenizer, int max_length,
         int draft_length, double temperature, double top_p, bool use_confidence_scheduling,
         double confidence_threshold, int top_k, double min_p, std::optional<uint64_t> seed, std::optional<int> n_threads,
         std::optional<std::string> draft_type, bool prompt_lookup, int branches, int branch_tail) {
    if (branches < 0 || branches > 8) throw py::value_error("branches must be in [0, 8], got " + std::to_string(branches));
    if (branch_tail < 0 || branch_tail > 16)
      throw py::value_error("branch_tail must be in [0, 16], got " + std::to_string(branch_tail));
    if (max_length < 2) throw py::value_error("max_length must be >= 2 (prompt + output tokens), got " + std::to_string(max_length));
    if (draft_length < 1 || draft_length > 64) throw py::value_error("draft_length must be in [1, 64], got " + std::to_string(draft_length));
    if (!(confidence_threshold >= 0 && confidence_threshold < 1))
      throw py::value_error("confidence_threshold must be in [0, 1), got " + std::to_string(confidence_threshold));
    if (n_threads && *n_threads < 1) throw py::value_error("n_threads must be >= 1");
    core_ = std::make_shared<Core>();
    Core& c = *core_;
    c.max_length = max_length;
    c.draft_length = draft_length;
    c.use_confidence_scheduling = use_confidence_scheduling;
    c.confidence_threshold = confidence_threshold;
    c.sampling.temperature = temperature;
    c.sampling.top_p = top_p;
    c.sampling.top_k = top_k;
    c.sampling.min_p = min_p;
    if (Status s = ValidateSamplingParams(c.sampling); !s.ok()) ThrowStatus(s);
    c.seeds.seed(seed ? *seed : std::random_device{}());

    if (py::isinstance<PyModel>(target_model)) c.target = target_model.cast<std::shared_ptr<PyModel>>();
    else c.target = LoadModel(FsPath(target_model, "target_model"), true);
    c.tokenizer = c.target->tokenizer;
    if (!tokenizer.is_none()) {
      if (!py::isinstance<PyTokenizer>(tokenizer))
        throw py::type_error("tokenizer: expected None (the target's own) or a dspark.Tokenizer");
      auto t = tokenizer.cast<std::shared_ptr<PyTokenizer>>();
      const std::string diff = VocabDifference(*t->tok, *c.target->tokenizer->tok);
      if (!diff.empty())
        throw py::value_error("tokenizer: its vocabulary is not the target model's (" + c.target->path + "): " + diff);
      c.tokenizer = t;
    }

    DrafterConfig dc;
    if (!draft_model.is_none()) {
      c.draft_path = py::isinstance<PyModel>(draft_model) ? draft_model.cast<std::shared_ptr<PyModel>>()->path
                                                          : FsPath(draft_model, "draft_model");
      dc.type = draft_type ? *draft_type : DraftTypeOf(c.draft_path);
      dc.draft_model = c.draft_path;
      if (dc.type == "draft-simple" || dc.type == "draft-dspark" || dc.type == "draft-dflash" || dc.type == "draft-eagle3") CheckReadable(c.draft_path);
    } else if (draft_type) {
      dc.type = *draft_type;  // "ngram" needs no model; the model drafters report the missing path
    } else if (prompt_lookup) {
      dc.type = "ngram";
    }
    if (dc.type == "synthetic") throw py::value_error("draft_type 'synthetic' is for benchmarks (dspark bench)");
    dc.ngram_first = prompt_lookup && dc.type != "none" && dc.type != "ngram";
    c.draft_type = dc.type;

    SpeculationOptions so;
    so.drafter = dc;
    so.schedule.n_max = draft_length;
    so.schedule.branches = branches;
    so.schedule.branch_tail = branch_tail;
    if (use_confidence_scheduling) {
      so.schedule.adaptive = true;
      so.schedule.p_min = confidence_threshold;
    } else {
      so.schedule.adaptive = false;
      so.schedule.p_min = 0;
      so.mode = ScheduleMode::kCut;
    }

    Status error;
    {
      py::gil_scoped_release nogil;
      c.pool = std::make_unique<ThreadPool>(n_threads ? *n_threads : ThreadPool::DefaultThreadCount());
      auto spec = BuildSpeculation(std::move(so), *c.target->model, *c.tokenizer->tok, *c.pool, max_length);
      if (!spec.ok()) {
        error = spec.status();
      } else {
        c.spec = std::move(*spec);
        BatchEngineOptions eo;
        eo.n_ctx = max_length;
        eo.schedule = c.spec.schedule;
        c.engine = std::make_unique<SpeculativeEngine>(*c.target->model, *c.tokenizer->tok, *c.pool, eo,
                                                       c.spec.drafter.get());
      }
    }
    if (!error.ok()) ThrowStatus(error);
  }

  py::object Generate(const py::object& input_ids, int max_new_tokens, bool do_sample, const CallOptions& call) {
    bool batched = false;
    std::vector<int32_t> prompt = ParseIds(input_ids, &batched);
    Core& c = *core_;
    GenerateOptions o = MakeOptions(c, max_new_tokens, do_sample, call);
    CapToContext(c, prompt, o);
    Result<GenerateResult> r = Status(StatusCode::kInternal, "not run");
    bool interrupted = false;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> run(c.run_mu);
      auto last_check = std::chrono::steady_clock::now();
      // Ctrl-C: every 50 ms take the GIL and let Python run its signal handlers; a raised
      // KeyboardInterrupt stays set on this thread and cancels the request.
      r = c.engine->GenerateFromIds(prompt, o, [&](const TokenEvent&) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last_check < std::chrono::milliseconds(50)) return true;
        last_check = now;
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) interrupted = true;
        return !interrupted;
      });
    }
    if (r.ok()) c.Record(*r);
    if (interrupted || PyErr_Occurred()) throw py::error_already_set();
    if (!r.ok()) ThrowStatus(r.status());
    if (r->stop_reason == "error") throw std::runtime_error("generation failed: " + r->error);
    std::vector<int32_t> out = std::move(prompt);
    out.insert(out.end(), r->ids.begin(), r->ids.end());
    py::list ids = py::cast(out);
    if (!batched) return ids;
    py::list batch;
    batch.append(ids);
    return batch;
  }

  std::shared_ptr<Core> core() const { return core_; }

 private:
  std::shared_ptr<Core> core_;
};

const char* kEngineDoc = R"doc(Speculative decoding over GGUF models: the target's exact output, faster.

SpeculativeDecodingEngine(target_model, draft_model=None, tokenizer=None, max_length=512,
    draft_length=5, temperature=0.8, top_p=0.95, use_confidence_scheduling=True,
    confidence_threshold=0.5, *, top_k=0, min_p=0.0, seed=None, n_threads=None,
    draft_type=None, prompt_lookup=False, branches=0, branch_tail=0)

target_model: a GGUF path or a loaded dspark.Model (several engines may share one).
draft_model: None (plain decoding), a GGUF path or a dspark.Model. The drafter is chosen from
    the file: general.architecture "dflash" is a block drafter ("draft-dspark" when the file has
    DSpark's Markov head, else "draft-dflash"), "eagle3" an EAGLE-3 head ("draft-eagle3"); any
    other architecture is a draft model ("draft-simple"), which must have the target's
    vocabulary (else ValueError naming the first differing token). A dspark.Model given as draft is opened again from its path.
tokenizer: None (the target's own) or a dspark.Tokenizer with exactly the target's vocabulary
    (else ValueError).
max_length: the context, prompt + generated tokens (the KV cache size): generate() returns at
    most max_length ids, as Hugging Face's max_length; a prompt must leave room for one token.
draft_length: the most tokens drafted per step (ScheduleOptions.n_max, --spec-draft-n-max).
temperature, top_p (and top_k, min_p): the sampling used by generate(do_sample=True).
use_confidence_scheduling, confidence_threshold: the library's speculation policy, as
    `dspark generate` applies it (speculative/speculation.h BuildSpeculation):
    True  -> adaptive scheduling (--spec-adaptive): each draft's length is chosen from measured
             acceptance and the target's profiled cost per verified row (plain decoding where
             drafting does not pay); confidence_threshold is p_min (--spec-draft-p-min): drafting
             stops below that draft probability (a draft model) or confidence (DSpark's
             confidence head). The verification mode is the library's default: cost-scheduled
             (verify the prefix with the best expected tokens per ms) when the drafter has a
             confidence head and confidence_threshold is 0, else the cut at p_min.
    False -> a fixed schedule: draft_length tokens every step, the cut schedule, p_min 0.
seed: seeds the sequence of seeds that sampling calls without their own seed use (None: random).
n_threads: threads of the engine's pool (default: the physical cores).
draft_type: override the drafter ("draft-simple", "draft-dspark", "draft-dflash", "draft-eagle3",
    "draft-mtp" (a deepseek2 target's own multi-token-prediction block: no draft model), or "ngram",
    prompt lookup without a model, then draft_model may be None).
prompt_lookup: prompt lookup first, the model drafter where the context does not repeat
    (--spec-ngram-first); without a draft model, prompt lookup alone ("ngram").
branches: token trees (--spec-branches): each draft token's next most likely alternatives verified
    beside it in the same pass (0: chains); with use_confidence_scheduling only those that pay.
branch_tail: (--spec-branch-tail) tokens proposed after each alternative, its side chain, verified
    with it where it pays (the n-gram and DSpark drafters propose them; 0: alternatives are leaves).

The output never depends on the drafter: greedy speculative decoding returns exactly the ids of
greedy plain decoding, and sampling is distributed exactly as plain sampling.)doc";

const char* kGenerateDoc = R"doc(Generates from the prompt ids; returns prompt + generated ids (a list of int).

input_ids: the prompt's token ids (a list, or a batch of one: [[...]], numpy/torch [1, n]).
Returns the prompt followed by the generated ids, as Hugging Face's generate() does (a batch of
one in, a batch of one out); the end-of-generation token that stopped it is not included.
do_sample=False: greedy (temperature 0). True: the engine's temperature/top_p/top_k/min_p,
overridden by the keyword arguments; seed=None draws the next seed from the engine's sequence.
stop: strings that end generation (their tokens are kept in the ids).
Runs without the GIL; Ctrl-C cancels it. engine.stats describes the call afterwards.)doc";

}  // namespace

void BindEngine(py::module_& m) {
  auto call_options = [](std::optional<double> temperature, std::optional<double> top_p, std::optional<int> top_k,
                         std::optional<double> min_p, std::optional<uint64_t> seed,
                         std::optional<std::vector<std::string>> stop, bool ignore_eos) {
    CallOptions c;
    c.temperature = temperature;
    c.top_p = top_p;
    c.top_k = top_k;
    c.min_p = min_p;
    c.seed = seed;
    if (stop) c.stop = *stop;
    c.ignore_eos = ignore_eos;
    return c;
  };

  py::class_<Engine>(m, "SpeculativeDecodingEngine", kEngineDoc)
      .def(py::init<const py::object&, const py::object&, const py::object&, int, int, double, double, bool, double,
                    int, double, std::optional<uint64_t>, std::optional<int>, std::optional<std::string>, bool, int, int>(),
           py::arg("target_model"), py::arg("draft_model") = py::none(), py::arg("tokenizer") = py::none(),
           py::arg("max_length") = 512, py::arg("draft_length") = 5, py::arg("temperature") = 0.8,
           py::arg("top_p") = 0.95, py::arg("use_confidence_scheduling") = true,
           py::arg("confidence_threshold") = 0.5, py::kw_only(), py::arg("top_k") = 0, py::arg("min_p") = 0.0,
           py::arg("seed") = py::none(), py::arg("n_threads") = py::none(), py::arg("draft_type") = py::none(),
           py::arg("prompt_lookup") = false, py::arg("branches") = 0, py::arg("branch_tail") = 0)
      .def(
          "generate",
          [call_options](Engine& e, const py::object& input_ids, int max_new_tokens, bool do_sample,
                         std::optional<double> temperature, std::optional<double> top_p, std::optional<int> top_k,
                         std::optional<double> min_p, std::optional<uint64_t> seed,
                         std::optional<std::vector<std::string>> stop, bool ignore_eos) {
            return e.Generate(input_ids, max_new_tokens, do_sample,
                              call_options(temperature, top_p, top_k, min_p, seed, std::move(stop), ignore_eos));
          },
          py::arg("input_ids"), py::arg("max_new_tokens") = 256, py::arg("do_sample") = false, py::kw_only(),
          py::arg("temperature") = py::none(), py::arg("top_p") = py::none(), py::arg("top_k") = py::none(),
          py::arg("min_p") = py::none(), py::arg("seed") = py::none(), py::arg("stop") = py::none(),
          py::arg("ignore_eos") = false, kGenerateDoc)
      .def(
          "stream",
          [call_options](Engine& e, const py::object& input_ids, int max_new_tokens, bool do_sample, bool with_text,
                         std::optional<double> temperature, std::optional<double> top_p, std::optional<int> top_k,
                         std::optional<double> min_p, std::optional<uint64_t> seed,
                         std::optional<std::vector<std::string>> stop, bool ignore_eos) {
            bool batched = false;
            std::vector<int32_t> prompt = ParseIds(input_ids, &batched);
            GenerateOptions o = MakeOptions(*e.core(), max_new_tokens, do_sample,
                                            call_options(temperature, top_p, top_k, min_p, seed, std::move(stop),
                                                         ignore_eos));
            CapToContext(*e.core(), prompt, o);
            return std::make_unique<TokenStream>(e.core(), std::move(prompt), std::move(o), with_text);
          },
          py::arg("input_ids"), py::arg("max_new_tokens") = 256, py::arg("do_sample") = false, py::kw_only(),
          py::arg("with_text") = false, py::arg("temperature") = py::none(), py::arg("top_p") = py::none(),
          py::arg("top_k") = py::none(), py::arg("min_p") = py::none(), py::arg("seed") = py::none(),
          py::arg("stop") = py::none(), py::arg("ignore_eos") = false, kStreamDoc)
      .def_property_readonly(
          "stats",
          [](const Engine& e) {
            Core& c = *e.core();
            std::lock_guard<std::mutex> lock(c.mu);
            return StatsDict(c.last_stats, c.last_stop_reason);
          },
          "Statistics of the last generate()/stream() run: total_tokens (generated), target_calls, "
          "draft_calls, drafted_tokens, accepted_tokens, acceptance_rate (accepted / drafted), tau (1 + "
          "accepted per draft), acceptance_per_position, the time split in ms (draft_ms, verify_ms, "
          "sample_ms, other_ms; prompt_ms, decode_ms), tokens_per_second (generated tokens / decode time), "
          "stop_reason, ...")
      .def_property_readonly(
          "cumulative_stats",
          [](const Engine& e) {
            Core& c = *e.core();
            std::unique_lock<std::mutex> run(c.run_mu, std::try_to_lock);
            if (!run.owns_lock()) throw std::runtime_error("cumulative_stats: a generation is running");
            return StatsDict(c.engine->cumulative_stats(), "");
          },
          "The statistics of every run of this engine together.")
      .def_property_readonly("tokenizer", [](const Engine& e) { return e.core()->tokenizer; })
      .def_property_readonly("target_model", [](const Engine& e) { return e.core()->target; })
      .def_property_readonly("device", [](const Engine&) { return "cpu (" + kernels::CpuTargetName() + ")"; },
                             "Where the kernels run: \"cpu (TARGET)\", TARGET the SIMD target they dispatch to.")
      .def_property_readonly("draft_type", [](const Engine& e) { return e.core()->draft_type; },
                             "none (plain decoding), draft-simple, draft-dspark, draft-dflash, draft-eagle3, draft-mtp or ngram.")
      .def_property_readonly("speculative", [](const Engine& e) { return e.core()->spec.drafter != nullptr; })
      .def_property_readonly("max_length", [](const Engine& e) { return e.core()->max_length; })
      .def_property_readonly("draft_length", [](const Engine& e) { return e.core()->draft_length; })
      .def_property_readonly(
          "schedule",
          [](const Engine& e) {
            const ScheduleOptions& s = e.core()->spec.schedule;
            py::dict d;
            d["n_max"] = s.n_max;
            d["n_min"] = s.n_min;
            d["p_min"] = s.p_min;
            d["adaptive"] = s.adaptive;
            d["mode"] = s.mode == ScheduleMode::kCost ? "cost" : "cut";
            d["branches"] = s.branches;
            d["branch_tail"] = s.branch_tail;
            return d;
          },
          "The schedule the library resolved (n_max, n_min, p_min, adaptive, mode: cut or cost, branches, "
          "branch_tail).")
      .def("__repr__", [](const Engine& e) {
        const Core& c = *e.core();
        std::string r = "<dspark.SpeculativeDecodingEngine target='" + c.target->path + "'";
        if (c.draft_type != "none") r += " " + c.draft_type + (c.draft_path.empty() ? "" : "='" + c.draft_path + "'");
        return r + " max_length=" + std::to_string(c.max_length) + ">";
      });
}

}  // namespace dspark::python
