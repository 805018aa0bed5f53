// Internal declarations shared by the files of the Python module `dspark` (not installed):
//   convert.cc         Status -> Python exception, paths, text, ids, the statistics dict
//   dspark_module.cc   PYBIND11_MODULE: the module's functions, Tokenizer and Model
//   engine_binding.cc  SpeculativeDecodingEngine: generate() and stream()
//   stream.cc          TokenStream: the engine on a worker thread, the iterator over its tokens
// Threads and the GIL: see dspark_module.cc.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // every file: the same conversions of std types everywhere

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "speculative/engine.h"
#include "speculative/speculation.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace py = pybind11;

namespace dspark::python {

// ---------------------------------------------------------------------------------------------
// convert.cc

// Raises `type` (an OSError subclass) with errno, message and, unless empty, the filename.
[[noreturn]] void RaiseOsError(PyObject* type, int err, const std::string& message, const std::string& path);
// A Status as the Python exception a user expects (ValueError, FileNotFoundError, OSError,
// RuntimeError: see the definition).
[[noreturn]] void ThrowStatus(const Status& s);

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) ThrowStatus(r.status());
  return std::move(r).value();
}

// os.fspath() of a str / bytes / os.PathLike; TypeError otherwise.
std::string FsPath(const py::handle& obj, const char* what);
// FileNotFoundError / PermissionError / IsADirectoryError with errno and filename, as open() raises.
void CheckReadable(const std::string& path);
// Text the engine produced: UTF-8, but a token may end inside a character (decode() of a partial
// sequence); such bytes become U+FFFD instead of raising.
py::str Utf8(std::string_view s);
std::shared_ptr<const gguf::File> OpenGguf(const std::string& path);
std::optional<int32_t> IdOrNone(int32_t id);
// The statistics dict of engine.stats, engine.cumulative_stats and stream.stats.
py::dict StatsDict(const SpecStats& s, const std::string& stop_reason);
// input_ids: a sequence of ints, or a batch of one such sequence (HF's [1, n] tensors; numpy
// arrays and torch tensors iterate as sequences). Sets *batched for the latter.
std::vector<int32_t> ParseIds(const py::handle& input, bool* batched);

// ---------------------------------------------------------------------------------------------
// dspark_module.cc: Tokenizer and Model

struct PyTokenizer {
  std::shared_ptr<const Tokenizer> tok;
  std::string path;
};

// The first difference between two vocabularies, or "" when they are equal.
std::string VocabDifference(const Tokenizer& a, const Tokenizer& b);

// A loaded target (weights and its tokenizer), shareable between engines.
struct PyModel {
  std::shared_ptr<Model> model;
  std::shared_ptr<PyTokenizer> tokenizer;
  std::string path;
};

std::string Architecture(const gguf::File& f);
std::shared_ptr<PyModel> LoadModel(const std::string& path, bool repack);

// ---------------------------------------------------------------------------------------------
// engine_binding.cc: the engine's state, shared by SpeculativeDecodingEngine and its streams

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

// Registers SpeculativeDecodingEngine (after TokenStream, which stream() returns).
void BindEngine(py::module_& m);

// ---------------------------------------------------------------------------------------------
// stream.cc: the engine on a worker thread, tokens through a queue.

class TokenStream {
 public:
  TokenStream(std::shared_ptr<Core> core, std::vector<int32_t> prompt, GenerateOptions options, bool with_text);
  ~TokenStream();

  py::object Next();
  // Cancels the generation (the engine stops at its next token) and waits for the worker.
  void Close();
  py::object Stats() const;
  py::object StopReason() const;

 private:
  struct State;

  void Join();

  std::shared_ptr<Core> core_;
  bool with_text_;
  bool closed_ = false;
  std::shared_ptr<State> state_;
  std::thread worker_;
};

extern const char* kStreamDoc;  // TokenStream's and SpeculativeDecodingEngine.stream()'s

// Registers TokenStream.
void BindTokenStream(py::module_& m);

}  // namespace dspark::python
