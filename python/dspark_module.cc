// The Python module `dspark`: speculative decoding with the parameters users of Hugging Face-style
// speculative decoding know (SpeculativeDecodingEngine), over the same engine, drafters and
// speculation policy as `dspark generate` (speculative/engine.h, speculative/speculation.h).
//
// Threads: generation runs without the GIL. generate() drives the engine on the calling thread and
// takes the GIL back only now and then to let Ctrl-C through; stream() drives it on a worker thread
// that never touches Python objects: it queues (id, text) items, and the iterator converts them
// under the GIL. One generation runs at a time per engine (the engine is single-threaded); others
// wait for it without holding the GIL.
//
// The module's files (binding.h): this one registers the module's functions, Tokenizer and Model;
// engine_binding.cc SpeculativeDecodingEngine, stream.cc TokenStream, convert.cc the conversions.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu_target.h"
#include "speculative/drafters/factory.h"
#include "util/log.h"

#include "binding.h"

#ifndef DSPARK_VERSION
#define DSPARK_VERSION "0.0.0"
#endif

namespace dspark::python {
namespace {

// ---------------------------------------------------------------------------------------------
// Tokenizer

std::shared_ptr<PyTokenizer> TokenizerFromPath(const std::string& path) {
  auto file = OpenGguf(path);
  auto out = std::make_shared<PyTokenizer>();
  out->tok = std::shared_ptr<const Tokenizer>(Unwrap(Tokenizer::FromGguf(*file)));
  out->path = path;
  return out;
}

}  // namespace

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

// ---------------------------------------------------------------------------------------------
// Model: a loaded target (weights and its tokenizer), shareable between engines.

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

  BindTokenStream(m);
  BindEngine(m);
}
