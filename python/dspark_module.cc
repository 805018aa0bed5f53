// The Python module `dspark`: speculative decoding with the parameters users of Hugging Face-style
// speculative decoding know (SpeculativeDecodingEngine), over the same engine, drafters and
// speculation policy as `dspark generate` (spec/engine.h, spec/speculation.h).
//
// Threads: generation runs without the GIL. generate() drives the engine on the calling thread and
// takes the GIL back only now and then to let Ctrl-C through; stream() drives it on a worker thread
// that never touches Python objects: it queues (id, text) items, and the iterator converts them
// under the GIL. One generation runs at a time per engine (the engine is single-threaded); others
// wait for it without holding the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/cpu_target.h"
#include "model/model.h"
#include "spec/drafters/factory.h"
#include "spec/engine.h"
#include "spec/speculation.h"
#include "tokenizer/tokenizer.h"
#include "util/log.h"
#include "util/status.h"
#include "util/thread_pool.h"

#ifndef DSPARK_VERSION
#define DSPARK_VERSION "0.0.0"
#endif

namespace py = pybind11;

namespace dspark::python {
namespace {

// ---------------------------------------------------------------------------------------------
// Errors: a Status becomes the Python exception a user expects.

[[noreturn]] void RaiseOsError(PyObject* type, int err, const std::string& message, const std::string& path) {
  py::object cls = py::reinterpret_borrow<py::object>(type);
  py::object exc = path.empty() ? cls(err, message) : cls(err, message, path);
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

// Invalid input (wrong vocabulary, bad options, unsupported file contents) -> ValueError; an
// unreadable file -> FileNotFoundError / PermissionError; a corrupt or truncated file -> OSError;
// anything else -> RuntimeError.
[[noreturn]] void ThrowStatus(const Status& s) {
  const std::string& msg = s.message();
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnimplemented:
    case StatusCode::kOutOfRange:
      throw py::value_error(msg);
    case StatusCode::kNotFound:
      // gguf::File::Open: "gguf: cannot open 'PATH': ..." (paths are checked before, see
      // CheckReadable; this is the race where the file went away). Otherwise a key or tensor
      // missing from a file that opened: the file is not a valid model of that kind.
      if (msg.rfind("gguf: cannot open", 0) == 0) RaiseOsError(PyExc_FileNotFoundError, ENOENT, msg, "");
      throw py::value_error(msg);
    case StatusCode::kDataLoss:
      RaiseOsError(PyExc_OSError, EIO, msg, "");
    default:
      throw std::runtime_error(msg);
  }
}

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) ThrowStatus(r.status());
  return std::move(r).value();
}

// os.fspath() of a str / bytes / os.PathLike; TypeError otherwise.
std::string FsPath(const py::handle& obj, const char* what) {
  py::object p;
  try {
    p = py::module_::import("os").attr("fspath")(obj);
  } catch (py::error_already_set&) {
    throw py::type_error(std::string(what) + ": expected a path (str or os.PathLike) or a dspark.Model, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  return p.cast<std::string>();  // str, or bytes as they are
}

// FileNotFoundError / PermissionError / IsADirectoryError with errno and filename, as open() raises.
void CheckReadable(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    RaiseOsError(PyExc_FileNotFoundError, ENOENT, std::strerror(ENOENT), path);
  if (std::filesystem::is_directory(st)) RaiseOsError(PyExc_IsADirectoryError, EISDIR, std::strerror(EISDIR), path);
  if (::access(path.c_str(), R_OK) != 0) RaiseOsError(PyExc_PermissionError, EACCES, std::strerror(EACCES), path);
}

// Text the engine produced: UTF-8, but a token may end inside a character (decode() of a partial
// sequence); such bytes become U+FFFD instead of raising.
py::str Utf8(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

std::shared_ptr<const gguf::File> OpenGguf(const std::string& path) {
  CheckReadable(path);
  std::unique_ptr<gguf::File> f;
  {
    py::gil_scoped_release nogil;
    auto r = gguf::File::Open(path);
    if (!r.ok()) {
      py::gil_scoped_acquire gil;
      ThrowStatus(r.status());
    }
    f = std::move(*r);
  }
  return std::shared_ptr<const gguf::File>(std::move(f));
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

struct PyTokenizer {
  std::shared_ptr<const Tokenizer> tok;
  std::string path;
};

std::shared_ptr<PyTokenizer> TokenizerFromPath(const std::string& path) {
  auto file = OpenGguf(path);
  auto out = std::make_shared<PyTokenizer>();
  out->tok = std::shared_ptr<const Tokenizer>(Unwrap(Tokenizer::FromGguf(*file)));
  out->path = path;
  return out;
}

// The first difference between two vocabularies, or "" when they are equal.
std::string VocabDifference(const Tokenizer& a, const Tokenizer& b) {
  const auto& x = a.tokens();
  const auto& y = b.tokens();
  const size_t common = std::min(x.size(), y.size());
  for (size_t i = 0; i < common; ++i)
    if (x[i] != y[i]) return "they differ at id " + std::to_string(i) + " ('" + x[i] + "' vs '" + y[i] + "')";
  if (x.size() != y.size())
    return "they have " + std::to_string(x.size()) + " and " + std::to_string(y.size()) + " tokens";
  return "";
}

std::optional<int32_t> IdOrNone(int32_t id) { return id < 0 ? std::nullopt : std::optional<int32_t>(id); }

// ---------------------------------------------------------------------------------------------
// Model: a loaded target (weights and its tokenizer), shareable between engines.

struct PyModel {
  std::shared_ptr<Model> model;
  std::shared_ptr<PyTokenizer> tokenizer;
  std::string path;
};

std::string Architecture(const gguf::File& f) { return Unwrap(f.GetStringOr("general.architecture", "")); }

std::shared_ptr<PyModel> LoadModel(const std::string& path, bool repack) {
  auto file = OpenGguf(path);
  const std::string arch = Architecture(*file);
  if (arch == "dflash")
    throw py::value_error(path + " is a DSpark/DFlash block drafter (general.architecture 'dflash'), not a model "
                                 "that runs alone: pass its path as draft_model to SpeculativeDecodingEngine");
  auto out = std::make_shared<PyModel>();
  out->path = path;
  out->tokenizer = std::make_shared<PyTokenizer>();
  out->tokenizer->path = path;
  Status error;
  {
    py::gil_scoped_release nogil;
    auto m = Model::FromFile(file, ModelOptions{repack});
    if (!m.ok()) {
      error = m.status();
    } else {
      out->model = std::shared_ptr<Model>(std::move(*m));
      auto t = Tokenizer::FromGguf(*file);
      if (!t.ok()) error = t.status();
      else out->tokenizer->tok = std::shared_ptr<const Tokenizer>(std::move(*t));
    }
  }
  if (!error.ok()) ThrowStatus(error);
  if (out->tokenizer->tok->n_vocab() != out->model->config().n_vocab)
    throw py::value_error(path + ": the tokenizer has " + std::to_string(out->tokenizer->tok->n_vocab()) +
                          " tokens but the embedding table has " + std::to_string(out->model->config().n_vocab) +
                          " rows");
  return out;
}

// ---------------------------------------------------------------------------------------------
// Statistics

py::dict StatsDict(const SpecStats& s, const std::string& stop_reason) {
  py::dict d;
  d["total_tokens"] = s.generated_tokens;
  d["prompt_tokens"] = s.prompt_tokens;
  d["target_calls"] = s.num_target_calls;
  d["draft_calls"] = s.num_draft_calls;
  d["drafts"] = s.num_drafts;
  d["drafted_tokens"] = s.num_draft_tokens;
  d["accepted_tokens"] = s.num_accepted_tokens;
  d["acceptance_rate"] = s.acceptance_rate();
  d["tau"] = s.tau();
  d["acceptance_per_position"] = s.acceptance_per_position();
  d["steps"] = s.num_steps;
  d["fallbacks"] = s.num_fallbacks;
  d["draft_ms"] = s.draft_ms;
  d["verify_ms"] = s.verify_ms;
  d["sample_ms"] = s.sample_ms;
  d["other_ms"] = s.other_ms;
  d["prompt_ms"] = s.prompt_ms;
  d["decode_ms"] = s.decode_ms;
  d["tokens_per_second"] = s.tokens_per_second();
  d["prompt_tokens_per_second"] = s.prompt_tokens_per_second();
  d["stop_reason"] = stop_reason;
  return d;
}

// ---------------------------------------------------------------------------------------------
// Engine

struct Core {
  // Declaration order is destruction order reversed: the engine goes before the drafter, the
  // drafter before the pool, the pool before the models.
  std::shared_ptr<PyModel> target;
  std::shared_ptr<PyTokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  Speculation spec;
  std::unique_ptr<SpeculativeEngine> engine;

  std::string draft_type = "none";
  std::string draft_path;
  int max_length = 0;
  int draft_length = 0;
  SamplingParams sampling;  // do_sample=True defaults
  bool use_confidence_scheduling = true;
  float confidence_threshold = 0;

  std::mutex run_mu;  // one generation at a time

  std::mutex mu;  // guards the fields below
  std::mt19937_64 seeds;
  SpecStats last_stats;
  std::string last_stop_reason;

  void Record(const GenerateResult& r) {
    std::lock_guard<std::mutex> lock(mu);
    last_stats = r.stats;
    last_stop_reason = r.stop_reason;
  }
  uint64_t NextSeed() {
    std::lock_guard<std::mutex> lock(mu);
    return seeds();
  }
};

// The draft type a file asks for: a `dflash` GGUF with DSpark's Markov head is a DSpark drafter,
// without one a DFlash drafter; any other architecture a draft model.
std::string DraftTypeOf(const std::string& path) {
  auto file = OpenGguf(path);
  if (Architecture(*file) != "dflash") return "draft-simple";
  return file->FindTensor("markov_w1.weight") != nullptr ? "draft-dspark" : "draft-dflash";
}

// input_ids: a sequence of ints, or a batch of one such sequence (HF's [1, n] tensors; numpy
// arrays and torch tensors iterate as sequences). Sets *batched for the latter.
std::vector<int32_t> ParseIds(const py::handle& input, bool* batched) {
  if (py::isinstance<py::str>(input) || py::isinstance<py::bytes>(input))
    throw py::type_error("input_ids: expected token ids, got text; encode it first: engine.tokenizer.encode(text)");
  if (!py::isinstance<py::iterable>(input)) throw py::type_error("input_ids: expected a sequence of token ids");
  std::vector<py::object> items;
  for (py::handle h : input) items.push_back(py::reinterpret_borrow<py::object>(h));
  *batched = false;
  // Nested: the first item is itself a sequence (a 1-D numpy array has __index__ too, so that
  // cannot tell; numpy's integer scalars are not iterable).
  if (!items.empty() && !PyLong_Check(items[0].ptr()) && py::isinstance<py::iterable>(items[0])) {
    if (items.size() != 1)
      throw py::value_error("input_ids: a batch of " + std::to_string(items.size()) +
                            " sequences; this engine decodes one sequence at a time (dspark serve batches requests)");
    *batched = true;
    std::vector<py::object> inner;
    for (py::handle h : items[0]) inner.push_back(py::reinterpret_borrow<py::object>(h));
    items = std::move(inner);
  }
  std::vector<int32_t> ids;
  ids.reserve(items.size());
  for (const auto& o : items) {
    if (!PyIndex_Check(o.ptr()))
      throw py::type_error("input_ids: token ids must be integers, got " +
                           std::string(py::str(py::type::of(o).attr("__name__"))));
    PyObject* index = PyNumber_Index(o.ptr());
    if (index == nullptr) throw py::error_already_set();
    const long long v = py::reinterpret_steal<py::int_>(index).cast<long long>();
    if (v < INT32_MIN || v > INT32_MAX) throw py::value_error("input_ids: token id " + std::to_string(v) + " is out of range");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw py::value_error("input_ids: the prompt is empty");
  return ids;
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
         std::optional<std::string> draft_type, bool prompt_lookup) {
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
      if (dc.type == "draft-simple" || dc.type == "draft-dspark" || dc.type == "draft-dflash") CheckReadable(c.draft_path);
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
      r = c.engine->GenerateFromIds(prompt, o, [&](int32_t, std::string_view, TokenSource) {
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

bool IsFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// ---------------------------------------------------------------------------------------------
// Streaming: the engine on a worker thread, tokens through a queue.

class TokenStream {
 public:
  TokenStream(std::shared_ptr<Core> core, std::vector<int32_t> prompt, GenerateOptions options, bool with_text)
      : core_(std::move(core)), with_text_(with_text), state_(std::make_shared<State>()) {
    worker_ = std::thread([core = core_, state = state_, prompt = std::move(prompt), options = std::move(options)] {
      std::lock_guard<std::mutex> run(core->run_mu);
      Result<GenerateResult> r = Status(StatusCode::kCancelled, "cancelled before it started");
      if (!state->cancel.load()) {
        r = core->engine->GenerateFromIds(prompt, options, [&](int32_t id, std::string_view text, TokenSource) {
          if (state->cancel.load()) return false;
          {
            std::lock_guard<std::mutex> lock(state->mu);
            state->items.emplace_back(id, std::string(text));
          }
          state->cv.notify_one();
          return !state->cancel.load();
        });
      }
      std::lock_guard<std::mutex> lock(state->mu);
      if (r.ok()) {
        core->Record(*r);
        state->stop_reason = r->stop_reason;
        state->stats = r->stats;
        if (r->stop_reason == "error") state->error = Internal("generation failed: {}", r->error);
      } else {
        state->error = r.status();
      }
      state->done = true;
      state->cv.notify_all();
    });
  }
  ~TokenStream() { Close(); }

  py::object Next() {
    std::pair<int32_t, std::string> item;
    for (;;) {
      bool have = false, done = false;
      {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> lock(state_->mu);
        state_->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !state_->items.empty() || state_->done; });
        if (!state_->items.empty()) {
          item = std::move(state_->items.front());
          state_->items.pop_front();
          have = true;
        } else {
          done = state_->done;
        }
      }
      if (have) {
        if (item.first < 0 && !with_text_) continue;  // the final text flush carries no token
        if (!with_text_) return py::int_(item.first);
        py::object id = item.first < 0 ? py::object(py::none()) : py::object(py::int_(item.first));
        return py::make_tuple(id, Utf8(item.second));
      }
      if (done) {
        Join();
        Status error;
        {
          std::lock_guard<std::mutex> lock(state_->mu);
          error = state_->error;
        }
        if (!error.ok() && !closed_) ThrowStatus(error);
        throw py::stop_iteration();
      }
      if (PyErr_CheckSignals() != 0) {  // Ctrl-C while waiting: stop the generation, then raise
        Close();
        throw py::error_already_set();
      }
    }
  }

  // Cancels the generation (the engine stops at its next token) and waits for the worker.
  void Close() {
    if (closed_ && !worker_.joinable()) return;
    closed_ = true;
    state_->cancel.store(true);
    Join();
  }

  py::object Stats() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done) return py::none();
    return StatsDict(state_->stats, state_->stop_reason);
  }
  py::object StopReason() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done) return py::none();
    return py::str(state_->stop_reason);
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<int32_t, std::string>> items;
    bool done = false;
    Status error;
    std::string stop_reason;
    SpecStats stats;
    std::atomic<bool> cancel{false};
  };

  void Join() {
    if (!worker_.joinable()) return;
    // The worker never takes the GIL, so joining while holding it cannot deadlock; release it when
    // possible so other Python threads run meanwhile (not while the interpreter shuts down).
    if (PyGILState_Check() && !IsFinalizing()) {
      py::gil_scoped_release nogil;
      worker_.join();
    } else {
      worker_.join();
    }
  }

  std::shared_ptr<Core> core_;
  bool with_text_;
  bool closed_ = false;
  std::shared_ptr<State> state_;
  std::thread worker_;
};

const char* kEngineDoc = R"doc(Speculative decoding over GGUF models: the target's exact output, faster.

SpeculativeDecodingEngine(target_model, draft_model=None, tokenizer=None, max_length=512,
    draft_length=5, temperature=0.8, top_p=0.95, use_confidence_scheduling=True,
    confidence_threshold=0.5, *, top_k=0, min_p=0.0, seed=None, n_threads=None,
    draft_type=None, prompt_lookup=False)

target_model: a GGUF path or a loaded dspark.Model (several engines may share one).
draft_model: None (plain decoding), a GGUF path or a dspark.Model. The drafter is chosen from
    the file: general.architecture "dflash" is a block drafter ("draft-dspark" when the file has
    DSpark's Markov head, else "draft-dflash"); any other architecture is a draft model
    ("draft-simple"), which must have the target's vocabulary (else ValueError naming the first
    differing token). A dspark.Model given as draft is opened again from its path.
tokenizer: None (the target's own) or a dspark.Tokenizer with exactly the target's vocabulary
    (else ValueError).
max_length: the context, prompt + generated tokens (the KV cache size): generate() returns at
    most max_length ids, as Hugging Face's max_length; a prompt must leave room for one token.
draft_length: the most tokens drafted per step (ScheduleOptions.n_max, --spec-draft-n-max).
temperature, top_p (and top_k, min_p): the sampling used by generate(do_sample=True).
use_confidence_scheduling, confidence_threshold: the library's speculation policy, as
    `dspark generate` applies it (spec/speculation.h BuildSpeculation):
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
draft_type: override the drafter ("draft-simple", "draft-dspark", "draft-dflash", or "ngram",
    prompt lookup without a model, then draft_model may be None).
prompt_lookup: prompt lookup first, the model drafter where the context does not repeat
    (--spec-ngram-first); without a draft model, prompt lookup alone ("ngram").

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

const char* kStreamDoc = R"doc(Generates like generate(), as an iterator (a TokenStream).

An iterator over the generated ids as they are committed (the prompt is not repeated); with
with_text=True it yields (id, text) pairs: the text each token made safe to show (possibly ""
while a UTF-8 character or stop string is pending), and a last (None, text) for held-back text.
Generation runs on a worker thread; leaving the loop early (break, close(), or dropping the
iterator) cancels it at the next token. The keyword arguments are generate()'s. After the last
item, stream.stats / stream.stop_reason (and engine.stats) describe the run.)doc";

}  // namespace
}  // namespace dspark::python

PYBIND11_MODULE(dspark, m) {
  using namespace dspark;
  using namespace dspark::python;
  m.doc() = "dspark: lossless speculative decoding over GGUF models (C++ engine, Python API).";
  m.attr("__version__") = DSPARK_VERSION;
  // Library log lines go to stderr (never stdout, which belongs to the caller); warnings and up.
  SetLogLevel(LogLevel::kWarn);

  m.def(
      "set_log_level",
      [](const std::string& level) {
        static const std::pair<const char*, LogLevel> kLevels[] = {
            {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo}, {"warning", LogLevel::kWarn},
            {"warn", LogLevel::kWarn},   {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
        for (const auto& [name, value] : kLevels)
          if (level == name) return SetLogLevel(value);
        throw py::value_error("set_log_level: unknown level '" + level + "' (debug, info, warning, error, off)");
      },
      py::arg("level"), "The engine's log level on stderr: debug, info, warning (the default), error or off.");
  m.def("cpu_target", &kernels::CpuTargetName, "The SIMD target the kernels dispatch to (Highway's name, e.g. AVX3_DL).");
  m.def("usable_cpu_targets", &kernels::UsableCpuTargets, "The compiled SIMD targets this CPU supports, best first.");
  m.def(
      "set_cpu_target",
      [](const std::string& name) {
        if (Status s = kernels::RestrictCpuTarget(name); !s.ok()) ThrowStatus(s);
      },
      py::arg("name"), "Run the kernels of this SIMD target (as `dspark --cpu-target`), e.g. to check a fallback path.");
  m.def("drafter_types", &DrafterTypes, "The drafter names (draft_type).");

  py::class_<PyTokenizer, std::shared_ptr<PyTokenizer>>(m, "Tokenizer",
                                                        "A GGUF model's tokenizer (llama.cpp-exact).")
      .def(py::init([](const py::object& path) { return TokenizerFromPath(FsPath(path, "Tokenizer")); }), py::arg("path"),
           "The tokenizer of a GGUF file (its tokenizer.ggml.* metadata).")
      .def(
          "encode",
          [](const PyTokenizer& t, const std::string& text, bool add_special_tokens, bool parse_special) {
            EncodeOptions eo;
            eo.add_bos = add_special_tokens;
            eo.add_eos = false;
            eo.parse_special = parse_special;
            return t.tok->Encode(text, eo);
          },
          py::arg("text"), py::arg("add_special_tokens") = true, py::arg("parse_special") = false,
          "Token ids of text. add_special_tokens: a BOS first where the vocabulary asks for one (never an "
          "EOS: the ids are a prompt). parse_special: recognise control tokens written as text (\"<|im_end|>\").")
      .def(
          "decode",
          [](const PyTokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return Utf8(t.tok->Decode(ids, !skip_special_tokens));
          },
          py::arg("ids"), py::arg("skip_special_tokens") = true,
          "The text of ids; decode(encode(text)) == text. Control tokens render as \"\" unless "
          "skip_special_tokens=False.")
      .def(
          "token_to_piece",
          [](const PyTokenizer& t, int32_t id, bool render_special) { return py::bytes(t.tok->TokenToPiece(id, render_special)); },
          py::arg("id"), py::arg("render_special") = false, "The raw bytes of one token.")
      .def("is_eog", [](const PyTokenizer& t, int32_t id) { return t.tok->IsEog(id); }, py::arg("id"),
           "Whether id ends generation (EOS, EOT, ...).")
      .def_property_readonly("vocab_size", [](const PyTokenizer& t) { return t.tok->n_vocab(); })
      .def("__len__", [](const PyTokenizer& t) { return t.tok->n_vocab(); })
      .def_property_readonly("bos_token_id", [](const PyTokenizer& t) { return IdOrNone(t.tok->bos_id()); })
      .def_property_readonly("eos_token_id", [](const PyTokenizer& t) { return IdOrNone(t.tok->eos_id()); })
      .def_property_readonly("eog_token_ids", [](const PyTokenizer& t) { return t.tok->eog_ids(); })
      .def_property_readonly("tokens", [](const PyTokenizer& t) { return t.tok->tokens(); },
                             "Every token's text as stored in the GGUF.")
      .def_property_readonly("path", [](const PyTokenizer& t) { return t.path; })
      .def("__repr__", [](const PyTokenizer& t) {
        return "<dspark.Tokenizer " + t.tok->model() + "/" + t.tok->pre_tokenizer() + ", " +
               std::to_string(t.tok->n_vocab()) + " tokens, from '" + t.path + "'>";
      });

  py::class_<PyModel, std::shared_ptr<PyModel>>(m, "Model",
                                                "A loaded GGUF model (weights and tokenizer), shareable by engines.")
      .def(py::init([](const py::object& path, bool repack) { return LoadModel(FsPath(path, "Model"), repack); }),
           py::arg("path"), py::arg("repack") = true,
           "Loads a GGUF model (llama, mistral, qwen2, qwen3). repack=False keeps the file's row layout "
           "(less memory, slower), as --no-repack.")
      .def_property_readonly("path", [](const PyModel& m) { return m.path; })
      .def_property_readonly("architecture", [](const PyModel& m) { return m.model->config().arch; })
      .def_property_readonly("name", [](const PyModel& m) { return m.model->config().name; })
      .def_property_readonly("n_vocab", [](const PyModel& m) { return m.model->config().n_vocab; })
      .def_property_readonly("n_layer", [](const PyModel& m) { return m.model->config().n_layer; })
      .def_property_readonly("n_embd", [](const PyModel& m) { return m.model->config().n_embd; })
      .def_property_readonly("n_ctx_train", [](const PyModel& m) { return m.model->config().n_ctx_train; })
      .def_property_readonly("tokenizer", [](const PyModel& m) { return m.tokenizer; })
      .def("__repr__", [](const PyModel& m) {
        const ModelConfig& c = m.model->config();
        return "<dspark.Model " + c.arch + ", " + std::to_string(c.n_layer) + " layers, n_embd " +
               std::to_string(c.n_embd) + ", from '" + m.path + "'>";
      });

  py::class_<TokenStream>(m, "TokenStream", kStreamDoc)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &TokenStream::Next)
      .def("close", &TokenStream::Close, "Cancel the generation and wait for it to stop.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](TokenStream& s, py::args) { s.Close(); return false; })
      .def_property_readonly("stats", &TokenStream::Stats, "The run's statistics once it has finished, else None.")
      .def_property_readonly("stop_reason", &TokenStream::StopReason,
                             "eos, stop, length, context or cancelled once finished, else None.");

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
                    int, double, std::optional<uint64_t>, std::optional<int>, std::optional<std::string>, bool>(),
           py::arg("target_model"), py::arg("draft_model") = py::none(), py::arg("tokenizer") = py::none(),
           py::arg("max_length") = 512, py::arg("draft_length") = 5, py::arg("temperature") = 0.8,
           py::arg("top_p") = 0.95, py::arg("use_confidence_scheduling") = true,
           py::arg("confidence_threshold") = 0.5, py::kw_only(), py::arg("top_k") = 0, py::arg("min_p") = 0.0,
           py::arg("seed") = py::none(), py::arg("n_threads") = py::none(), py::arg("draft_type") = py::none(),
           py::arg("prompt_lookup") = false)
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
                             "none (plain decoding), draft-simple, draft-dspark, draft-dflash or ngram.")
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
            return d;
          },
          "The schedule the library resolved (n_max, n_min, p_min, adaptive, mode: cut or cost).")
      .def("__repr__", [](const Engine& e) {
        const Core& c = *e.core();
        std::string r = "<dspark.SpeculativeDecodingEngine target='" + c.target->path + "'";
        if (c.draft_type != "none") r += " " + c.draft_type + (c.draft_path.empty() ? "" : "='" + c.draft_path + "'");
        return r + " max_length=" + std::to_string(c.max_length) + ">";
      });
}
