// BatchEngine: starting a request from cached rows (its slot's own, another slot's, or the host
// prompt store's), and what each slot holds for the next request to share.
#include <algorithm>
#include <new>

#include "speculative/batch_engine.h"
#include "speculative/batch_sequence.h"
#include "speculative/prompt_cache.h"
#include "util/log.h"

namespace dspark {

bool BatchEngine::WaitsForSharedPrefill(const std::vector<int32_t>& prompt) const {
  const size_t cap = prompt.size() - 1;
  for (const auto& q : slots_) {
    if (q == nullptr || q->decoding()) continue;
    const size_t common = std::min(CommonPrefix(q->prompt, prompt), cap);
    if (common >= kMinCopyRows && static_cast<size_t>(q->n_prefilled) < common) return true;
  }
  return false;
}

std::span<const int32_t> BatchEngine::CachedTokens(int slot) const {
  const Sequence* s = slots_[slot].get();
  if (s == nullptr) return retained_[slot];
  if (!s->decoding()) return std::span<const int32_t>(s->prompt).first(s->n_prefilled);
  return std::span<const int32_t>(s->context).first(
      std::min(s->context.size(), static_cast<size_t>(cache_.Length(slot))));
}

void BatchEngine::StartFromCache(Sequence& s, int slot) {
  // At least the prompt's last row runs through the target: its logits sample the first token.
  const size_t cap = s.prompt.size() - 1;
  size_t rows = 0;
  int from = slot;
  const PromptStore::Entry* entry = nullptr;
  if (options_.prompt_cache) {
    const size_t own = CommonPrefix(retained_[slot], s.prompt);
    rows = std::min(own, cap);
    for (int other = 0; other < options_.n_parallel; ++other) {
      if (other == slot) continue;
      const size_t r = std::min(CommonPrefix(CachedTokens(other), s.prompt), cap);
      if (r >= rows + kMinCopyRows) {
        rows = r;
        from = other;
      }
    }
    // Rows of this slot the new request does not share would be lost: the host store keeps them
    // (before it is searched, so that the entry found cannot be evicted by this save).
    // The cache only saves work: rows it finds no memory for are dropped, and the request goes on.
    if (retained_[slot].size() >= own + kMinCopyRows) {
      Status st = Status::Ok();
      try {
        std::unique_ptr<DrafterRows> drafter_rows =
            drafter_ != nullptr && drafter_rows_valid_[slot]
                ? drafter_->SaveRows(slot, static_cast<int>(retained_[slot].size()))
                : nullptr;
        st = store_.Save(retained_[slot], cache_, slot, std::move(drafter_rows));
      } catch (const std::bad_alloc&) {
        st = Status(StatusCode::kResourceExhausted, "out of memory");
      }
      if (!st.ok()) DSPARK_LOG_WARN("prompt cache: keeping slot {}'s rows failed: {}", slot, st.message());
    }
    const PromptStore::Match m = store_.capacity() > 0 ? store_.Find(s.prompt) : PromptStore::Match{};
    if (m.entry != nullptr && std::min(m.rows, cap) >= rows + kMinCopyRows) {
      rows = std::min(m.rows, cap);
      from = -1;
      entry = m.entry;
    }
  }
  retained_[slot].clear();
  int reuse = static_cast<int>(rows);
  if (s.use_drafter) {
    if (reuse > 0) {
      // The drafter's rows of a slot belong to its last request only if that request drafted.
      const bool valid = from < 0 || (slots_[from] != nullptr ? slots_[from]->use_drafter : drafter_rows_valid_[from] != 0);
      Result<int> kept = drafter_->BeginWithPrefix(slot, valid ? from : -1, reuse,
                                                   entry != nullptr ? entry->drafter.get() : nullptr);
      if (kept.ok()) reuse = std::min(reuse, *kept);
      else FailDrafter(s, kept.status());
    } else if (Status st = drafter_->Begin(slot); !st.ok()) {
      FailDrafter(s, st);
    }
  }
  Status st = Status::Ok();
  if (reuse == 0) cache_.Clear(slot);
  else if (from == slot) st = cache_.Truncate(slot, reuse);
  else if (from >= 0) st = cache_.CopyPrefixFrom(cache_, from, slot, reuse);
  else st = cache_.CopyPrefixFrom(*entry->kv, 0, slot, reuse);
  if (!st.ok()) {
    DSPARK_LOG_WARN("prompt cache: reusing {} rows failed, starting cold: {}", reuse, st.message());
    cache_.Clear(slot);
    reuse = 0;
    if (s.use_drafter) FailDrafter(s, st);  // its state may hold rows the target no longer has
  }
  s.n_prefilled = reuse;
  s.result.stats.prompt_cached_tokens = reuse;
}

}  // namespace dspark
