#include "speculative/drafters/factory.h"

#include <filesystem>

#include "model/eagle3_forward.h"
#include "model/mtp_head.h"
#include "speculative/drafters/draft_model.h"
#include "speculative/drafters/dspark_drafter.h"
#include "speculative/drafters/head_drafter.h"
#include "speculative/drafters/lookup_first.h"
#include "speculative/drafters/synthetic.h"

namespace dspark {

std::vector<std::string> DrafterTypes() {
  return {"none", "draft-simple", "draft-dspark", "draft-dflash", "draft-eagle3", "draft-mtp", "ngram", "synthetic"};
}

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
// A draft head (dflash, eagle3) must carry its target's tokenizer, token for token.
Status CheckDraftTokenizer(const gguf::File& f, const Tokenizer& target_vocab) {
  if (!f.Has("tokenizer.ggml.tokens"))
    return InvalidArgument("spec: {}: the draft has no tokenizer (tokenizer.ggml.tokens); a draft head must carry "
                           "its target's tokenizer",
                           f.path());
  DSPARK_ASSIGN_OR_RETURN(std::vector<std::string> toks, f.GetStringArray("tokenizer.ggml.tokens"));
  const auto& want = target_vocab.tokens();
  const size_t common = std::min(toks.size(), want.size());
  for (size_t i = 0; i < common; ++i)
    if (toks[i] != want[i])
      return InvalidArgument("spec: {}: draft tokenizer differs from the target's at id {} ('{}' vs '{}'); use a "
                             "draft trained for this target",
                             f.path(), i, toks[i], want[i]);
  if (toks.size() != want.size())
    return InvalidArgument("spec: {}: draft tokenizer has {} tokens, the target's {}; use a draft trained for this "
                           "target",
                           f.path(), toks.size(), want.size());
  return Status::Ok();
}

// The draft of --spec-type draft-dspark / draft-dflash: a dflash GGUF of the kind the flag names
// (a Markov head makes it DSpark, as llama.cpp tells them apart) with the target's tokenizer; a
// p-min cut on DSpark reads its confidence head, so the head must be there (as llama.cpp requires).
Result<std::unique_ptr<DflashModel>> LoadBlockDraft(const DrafterConfig& config, const Model& target,
                                                    const Tokenizer& target_vocab) {
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> opened, gguf::File::Open(config.draft_model));
  std::shared_ptr<const gguf::File> file(std::move(opened));
  const gguf::File& f = *file;
  DSPARK_ASSIGN_OR_RETURN(std::string arch, f.GetStringOr("general.architecture", ""));
  if (arch != "dflash")
    return InvalidArgument(
        "spec: {}: general.architecture is '{}', but --spec-type {} needs a dflash draft GGUF "
        "(general.architecture = dflash); use --spec-type draft-simple for an ordinary draft model",
        f.path(), arch, config.type);
  const bool dspark = config.type == "draft-dspark";
  const bool has_markov = f.FindTensor("markov_w1.weight") != nullptr;
  if (dspark && !has_markov)
    return InvalidArgument(
        "spec: {}: this is a DFlash draft without a Markov head (no markov_w1.weight), not a DSpark draft; "
        "use --spec-type draft-dflash",
        f.path());
  if (!dspark && has_markov)
    return InvalidArgument("spec: {}: this is a DSpark draft (it has markov_w1.weight); use --spec-type draft-dspark",
                           f.path());
  DSPARK_TRY(CheckDraftTokenizer(f, target_vocab));
  DflashLoadOptions o;
  o.repack = config.repack;
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<DflashModel> m, DflashModel::FromFile(std::move(file), target, o));
  if (dspark && config.p_min > 0 && !m->config().has_confidence)
    return InvalidArgument("spec: {}: DSpark draft has no confidence head: set --spec-draft-p-min 0", m->path());
  return m;
}

// The head of --spec-type draft-eagle3: an eagle3 GGUF with the target's tokenizer.
Result<std::unique_ptr<Eagle3Model>> LoadEagle3(const DrafterConfig& config, const Model& target,
                                                const Tokenizer& target_vocab) {
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> opened, gguf::File::Open(config.draft_model));
  std::shared_ptr<const gguf::File> file(std::move(opened));
  DSPARK_ASSIGN_OR_RETURN(std::string arch, file->GetStringOr("general.architecture", ""));
  if (arch != "eagle3")
    return InvalidArgument("spec: {}: general.architecture is '{}', but --spec-type draft-eagle3 needs an EAGLE-3 head "
                           "(general.architecture = eagle3)",
                           file->path(), arch);
  DSPARK_TRY(CheckDraftTokenizer(*file, target_vocab));
  Eagle3LoadOptions o;
  o.repack = config.repack;
  return Eagle3Model::FromFile(std::move(file), target, o);
}

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
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<DflashModel> m, LoadBlockDraft(config, target, target_vocab));
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<DSparkDrafter> d, DSparkDrafter::Create(std::move(m), draft_pool, n_ctx,
                                                                                    config.dspark_full_block));
    d->AdoptPool(std::move(own_pool));
    return std::unique_ptr<Drafter>(std::move(d));
  }
  if (config.type == "draft-eagle3") {
    if (config.draft_model.empty()) return InvalidArgument("spec: --spec-type draft-eagle3 needs -md HEAD.gguf");
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<Eagle3Model> m, LoadEagle3(config, target, target_vocab));
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<HeadDrafter> d,
                            HeadDrafter::Create(std::make_unique<Eagle3Forward>(std::move(m)), draft_pool, n_ctx,
                                                config.max_draft));
    d->AdoptPool(std::move(own_pool));
    return std::unique_ptr<Drafter>(std::move(d));
  }
  if (config.type == "draft-mtp") {
    // The target's own nextn block drafts. llama.cpp takes the model again as -md: accept that.
    std::error_code ec;
    if (!config.draft_model.empty() && !std::filesystem::equivalent(config.draft_model, target.file().path(), ec))
      return InvalidArgument("spec: --spec-type draft-mtp drafts with the target's own multi-token-prediction block; "
                             "-md {} is not the target ({})",
                             config.draft_model, target.file().path());
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<MtpHead> head, MtpHead::Create(target));
    DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<HeadDrafter> d,
                            HeadDrafter::Create(std::move(head), draft_pool, n_ctx, config.max_draft));
    d->AdoptPool(std::move(own_pool));
    return std::unique_ptr<Drafter>(std::move(d));
  }
  std::string known;
  for (const auto& t : DrafterTypes()) known += (known.empty() ? "" : ", ") + t;
  return InvalidArgument("spec: unknown --spec-type '{}' (known: {})", config.type, known);
}
}  // namespace

}  // namespace dspark
