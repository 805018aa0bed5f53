#include "cli/common.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace dspark::cli {

Result<LoadedModel> LoadModelAndTokenizer(const std::string& path, const ModelOptions& options) {
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::Open(path));
  std::shared_ptr<const gguf::File> shared(std::move(file));
  LoadedModel out;
  DSPARK_ASSIGN_OR_RETURN(out.model, Model::FromFile(shared, options));
  DSPARK_ASSIGN_OR_RETURN(out.tokenizer, Tokenizer::FromGguf(*shared));
  if (out.tokenizer->n_vocab() != out.model->config().n_vocab)
    return InvalidArgument("{}: tokenizer has {} tokens but the embedding table has {} rows", path,
                           out.tokenizer->n_vocab(), out.model->config().n_vocab);
  return out;
}

Result<std::string> ReadTextFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read {} '{}'", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Internal("error reading {} '{}'", what, path);
  return ss.str();
}

std::string DefaultModelPath() {
#ifdef DSPARK_SOURCE_DIR
  const std::string bundled = std::string(DSPARK_SOURCE_DIR) + "/models/ref-target.gguf";
  if (access(bundled.c_str(), R_OK) == 0) return bundled;
#endif
  return "models/ref-target.gguf";
}

void AddDrafterFlags(CLI::App* sub, DrafterConfig* drafter, const std::string& types_help, bool synthetic) {
  sub->add_option("--model-draft,--md", drafter->draft_model, "Draft model GGUF (draft-simple, draft-dspark, draft-dflash, draft-eagle3; draft-mtp: none)");
  sub->add_option("--threads-draft,--td", drafter->threads,
                  "Threads of a model drafter (draft-simple, draft-dspark, draft-eagle3); default: the target's pool")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--spec-type", drafter->type, types_help)->capture_default_str();
  sub->add_option("--spec-ngram-min", drafter->ngram.n_min, "Shortest n-gram to match")->capture_default_str();
  sub->add_option("--spec-ngram-max", drafter->ngram.n_max, "Longest n-gram to match")->capture_default_str();
  sub->add_flag("--spec-ngram-first", drafter->ngram_first,
                "Prompt lookup first: where the last n tokens occurred before, propose what followed (free); "
                "the model drafter drafts only where the context does not repeat");
  sub->add_flag("--spec-dspark-full-block", drafter->dspark_full_block,
                "draft-dspark/draft-dflash: run the whole trained block every step (llama.cpp's behaviour) instead of "
                "only the rows the draft budget needs");
  if (synthetic)
    sub->add_option("--spec-synthetic-accept", drafter->synthetic_accept, "Per-token acceptance of the synthetic drafter")
        ->capture_default_str();
}

}  // namespace dspark::cli
