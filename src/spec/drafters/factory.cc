#include "spec/drafters/factory.h"

#include "spec/drafters/draft_model.h"
#include "spec/drafters/dspark_drafter.h"
#include "spec/drafters/lookup_first.h"
#include "spec/drafters/synthetic.h"

namespace dspark {

std::vector<std::string> DrafterTypes() { return {"none", "draft-simple", "draft-dspark", "draft-dflash", "ngram", "synthetic"}; }

namespace {
Result<std::unique_ptr<Drafter>> CreateOne(const DrafterConfig& config, const Model& target,
                                           const Tokenizer& target_vocab, ThreadPool& pool, int n_ctx);
}  // namespace

Result<std::unique_ptr<Drafter>> CreateDrafter(const DrafterConfig& config, const Model& target,
                                               const Tokenizer& target_vocab, ThreadPool& pool, int n_ctx) {
  if (config.type == "none") return std::unique_ptr<Drafter>();
  if (config.type == "ngram" || config.ngram_first) {
    if (config.ngram.n_min < 1 || config.ngram.n_max < config.ngram.n_min)
      return InvalidArgument("spec: need 1 <= --spec-ngram-min <= --spec-ngram-max, got {}..{}", config.ngram.n_min,
                             config.ngram.n_max);
  }
  if (config.ngram_first && config.type != "ngram") {
    if (config.type == "synthetic")
      return InvalidArgument("spec: --spec-ngram-first goes with a model drafter, not --spec-type synthetic");
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<Drafter> model, CreateOne(config, target, target_vocab, pool, n_ctx));
    return std::unique_ptr<Drafter>(new LookupFirstDrafter(config.ngram, std::move(model)));
  }
  return CreateOne(config, target, target_vocab, pool, n_ctx);
}

namespace {
Result<std::unique_ptr<Drafter>> CreateOne(const DrafterConfig& config, const Model& target,
                                           const Tokenizer& target_vocab, ThreadPool& pool, int n_ctx) {
  if (config.type == "ngram") return std::unique_ptr<Drafter>(new NgramDrafter(config.ngram));
  if (config.type == "synthetic") {
    if (!(config.synthetic_accept >= 0 && config.synthetic_accept <= 1))
      return InvalidArgument("spec: synthetic acceptance must be in [0, 1], got {}", config.synthetic_accept);
    return std::unique_ptr<Drafter>(
        new SyntheticDrafter(config.synthetic_reference, target.config().n_vocab, config.synthetic_accept));
  }
  if (config.threads < 0) return InvalidArgument("spec: --threads-draft must be >= 0, got {}", config.threads);
  std::unique_ptr<ThreadPool> own_pool;
  if (config.threads > 0 && config.threads != pool.num_threads()) own_pool = std::make_unique<ThreadPool>(config.threads);
  ThreadPool& draft_pool = own_pool ? *own_pool : pool;
  if (config.type == "draft-simple") {
    if (config.draft_model.empty()) return InvalidArgument("spec: --spec-type draft-simple needs -md DRAFT.gguf");
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::Open(config.draft_model));
    std::shared_ptr<const gguf::File> shared(std::move(file));
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<Model> draft, Model::FromFile(shared, ModelOptions{config.repack}));
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> draft_vocab, Tokenizer::FromGguf(*shared));
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<DraftModelDrafter> d,
                            DraftModelDrafter::Create(std::move(draft), *draft_vocab, target_vocab, draft_pool, n_ctx,
                                                      config.max_draft, config.n_seq));
    d->AdoptPool(std::move(own_pool));
    return std::unique_ptr<Drafter>(std::move(d));
  }
  if (config.type == "draft-dspark" || config.type == "draft-dflash") {
    if (config.draft_model.empty()) return InvalidArgument("spec: --spec-type {} needs -md DRAFT.gguf", config.type);
    DflashLoadOptions o;
    o.expect_markov_head = config.type == "draft-dspark";
    o.need_confidence = config.type == "draft-dspark" && config.p_min > 0;
    o.repack = config.repack;
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<DflashModel> m, DflashModel::Load(config.draft_model, target, target_vocab, o));
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<DSparkDrafter> d, DSparkDrafter::Create(std::move(m), draft_pool, n_ctx,
                                                                                    config.dspark_full_block));
    d->AdoptPool(std::move(own_pool));
    return std::unique_ptr<Drafter>(std::move(d));
  }
  std::string known;
  for (const auto& t : DrafterTypes()) known += (known.empty() ? "" : ", ") + t;
  return InvalidArgument("spec: unknown --spec-type '{}' (known: {})", config.type, known);
}
}  // namespace

}  // namespace dspark
