// `dspark quantize IN OUT TYPE`: re-encodes a GGUF file's weight matrices (model/quantize.h).
// TYPE is one type for every matrix (Q8_0, Q4_K, ...) or llama.cpp's Q4_K_M mixture.
#include <cstdio>
#include <cstring>

#include "cli/commands.h"
#include "model/quantize.h"
#include "util/progress.h"

namespace dspark::cli {

namespace {
struct QuantizeFlags {
  std::string in, out, type;
};

int RunQuantize(const QuantizeFlags& f) {
  const auto target = QuantizeTargetFromName(f.type);
  if (!target)
    return Fail(InvalidArgument("quantize: unsupported target type '{}' ({})", f.type, QuantizeTargetNames()));
  ProgressBar bar("quantize");
  QuantizeReport report;
  Status s = QuantizeFile(f.in, f.out, *target, &report, [&](uint64_t d, uint64_t t) { bar.Update(d, t); });
  bar.Finish();
  if (!s.ok()) return Fail(s);
  std::fprintf(stderr, "dspark: wrote %s: %d tensors quantised to %s, %d kept\n", f.out.c_str(), report.converted,
               f.type.c_str(), report.kept);
  return 0;
}
}  // namespace

Runner RegisterQuantize(CLI::App& app) {
  auto f = std::make_shared<QuantizeFlags>();
  CLI::App* sub = app.add_subcommand("quantize", "Quantise a GGUF model's weight matrices");
  sub->add_option("input", f->in, "Input GGUF")->required();
  sub->add_option("output", f->out, "Output GGUF")->required();
  sub->add_option("type", f->type, QuantizeTargetNames())->required();
  return [f] { return RunQuantize(*f); };
}

}  // namespace dspark::cli
