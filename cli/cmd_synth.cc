// `dspark synth SHAPE OUT --vocab VOCAB.gguf --type T`: a random-weight model of a real shape with a
// real tokenizer, for benchmarks on models no registry here can ship.
#include <cstdio>

#include "cli/commands.h"
#include "model/synth.h"
#include "util/progress.h"

namespace dspark::cli {

namespace {
struct SynthFlags {
  std::string shape, out, vocab, type = "Q8_0";
  uint64_t seed = 1;
  int layers = 0;
  int nextn = 0;
};

int RunSynth(const SynthFlags& f) {
  auto spec = SynthShape(f.shape);
  if (!spec) {
    std::string names;
    for (const auto& n : SynthShapeNames()) names += (names.empty() ? "" : ", ") + n;
    return Fail(InvalidArgument("synth: unknown shape '{}' (known: {})", f.shape, names));
  }
  // A quantize target (a type or the Q4_K_M mixture), or any other type the writer can encode (F32).
  auto target = QuantizeTargetFromName(f.type);
  if (!target) {
    const auto type = DTypeFromName(f.type);
    if (!type) return Fail(InvalidArgument("synth: unknown weight type '{}' (known: F32, {})", f.type, QuantizeTargetNames()));
    target = QuantizeTarget{*type, QuantizeMix::kUniform};
  }
  spec->matrix_type = target->type;
  spec->matrix_mix = target->mix;
  spec->seed = f.seed;
  if (f.layers < 0) return Fail(InvalidArgument("synth: --layers {} must be positive", f.layers));
  if (f.layers > 0) spec->n_layer = f.layers;
  if (f.nextn < 0) return Fail(InvalidArgument("synth: --nextn {} must not be negative", f.nextn));
  spec->n_nextn = f.nextn;
  std::unique_ptr<gguf::File> vocab;
  if (!f.vocab.empty()) {
    auto v = gguf::File::Open(f.vocab);
    if (!v.ok()) return Fail(v.status());
    vocab = std::move(*v);
  }
  ProgressBar bar("synth " + f.shape);
  Status s = WriteSynthModel(*spec, vocab.get(), f.out, [&](uint64_t d, uint64_t t) { bar.Update(d, t); });
  bar.Finish();
  if (!s.ok()) return Fail(s);
  std::fprintf(stderr, "dspark: wrote %s (%s, %s)\n", f.out.c_str(), f.shape.c_str(), f.type.c_str());
  return 0;
}
}  // namespace

Runner RegisterSynth(CLI::App& app) {
  auto f = std::make_shared<SynthFlags>();
  CLI::App* sub = app.add_subcommand("synth", "Write a random-weight model of a real shape");
  sub->add_option("shape", f->shape, "qwen3-0.6b, qwen3-1.7b, llama-3.2-1b, qwen3-30b-a3b, deepseek-v2-lite or deepseek-v3-mini")->required();
  sub->add_option("output", f->out, "Output GGUF")->required();
  sub->add_option("--vocab", f->vocab, "GGUF whose tokenizer to copy (else a toy vocabulary)");
  sub->add_option("--type", f->type, "Weight type: Q8_0, Q4_K, Q4_K_M, Q4_0, Q6_K, F16, ...")->capture_default_str();
  sub->add_option("--seed", f->seed, "Weight seed")->capture_default_str();
  sub->add_option("--layers", f->layers, "Blocks (default: the shape's own; fewer for small test models)");
  sub->add_option("--nextn", f->nextn,
                  "Multi-token-prediction blocks after the trunk (deepseek shapes; --spec-type draft-mtp runs them)");
  return [f] { return RunSynth(*f); };
}

}  // namespace dspark::cli
