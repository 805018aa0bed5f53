#include "cli/common.h"

#include <unistd.h>

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

std::string DefaultModelPath() {
#ifdef DSPARK_SOURCE_DIR
  const std::string bundled = std::string(DSPARK_SOURCE_DIR) + "/models/ref-target.gguf";
  if (access(bundled.c_str(), R_OK) == 0) return bundled;
#endif
  return "models/ref-target.gguf";
}

}  // namespace dspark::cli
