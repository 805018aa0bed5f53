// The prompt cache for drafters that keep a context of rows per sequence (DSpark, EAGLE-3): a
// context's rows saved with the host prompt cache, and where a request that starts with a known
// prefix finds them. Context: KeepPrefixOf(other, n), length(), bytes(), and a (model, rows)
// constructor; a drafter's per-sequence state holds it as `ctx` (a unique_ptr).
#pragma once

#include <algorithm>
#include <memory>

#include "speculative/drafter.h"

namespace dspark {

template <class Context, class ModelT>
class SavedContextRows final : public DrafterRows {
 public:
  SavedContextRows(const ModelT& model, int rows) : ctx(model, rows) {}
  size_t bytes() const override { return ctx.bytes(); }
  Context ctx;
};

// The first rows of `ctx` (at most its length) for the prompt cache; null if there are none.
template <class Context, class ModelT>
std::unique_ptr<DrafterRows> SaveContextRows(const Context* ctx, const ModelT& model, int rows) {
  if (ctx == nullptr) return nullptr;
  const int keep = std::min(rows, ctx->length());
  if (keep <= 0) return nullptr;
  auto saved = std::make_unique<SavedContextRows<Context, ModelT>>(model, keep);
  if (!saved->ctx.KeepPrefixOf(*ctx, keep).ok()) return nullptr;
  return saved;
}

// Where the rows of a prefix come from (Drafter::BeginWithPrefix): slot `from`'s context in
// `seqs` (a map from slot to state), or with from == -1 what `saved` holds; null if neither.
template <class Context, class ModelT, class Seqs>
const Context* PrefixSource(const Seqs& seqs, int from, const DrafterRows* saved) {
  if (from >= 0) {
    auto it = seqs.find(from);
    return it != seqs.end() ? it->second.ctx.get() : nullptr;
  }
  const auto* kept = dynamic_cast<const SavedContextRows<Context, ModelT>*>(saved);
  return kept != nullptr ? &kept->ctx : nullptr;
}

}  // namespace dspark
