#include "speculative/prompt_cache.h"

#include <algorithm>
#include <new>

#include "util/fault_injection.h"

namespace dspark {

size_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

Status PromptStore::Save(std::span<const int32_t> tokens, const KvCache& from, int seq,
                         std::unique_ptr<DrafterRows> drafter) {
  if (capacity_ == 0 || tokens.empty()) return Status::Ok();
  for (auto it = entries_.begin(); it != entries_.end();) {
    const size_t common = CommonPrefix(it->tokens, tokens);
    if (common == tokens.size()) {  // already held (as it is, or inside a longer entry)
      entries_.splice(entries_.begin(), entries_, it);
      return Status::Ok();
    }
    if (common == it->tokens.size()) {  // the new rows extend this entry: it goes
      used_ -= it->bytes();
      it = entries_.erase(it);
      continue;
    }
    ++it;
  }
  const int n = static_cast<int>(tokens.size());
  // The bytes an entry takes are known once its cache exists (whole pages): size it, then evict.
  // Without memory for it, the least recently used entries go until it fits; with none left, the
  // rows are not kept. The cache only saves work, so no request fails for it.
  std::unique_ptr<KvCache> kv;
  for (;;) {
    try {
      MaybeInjectAllocationFailure(FaultPoint::kPromptCacheSave);
      kv = std::make_unique<KvCache>(config_, 1, n, kv_type_);
      break;
    } catch (const std::bad_alloc&) {
      ++allocation_failures_;
      if (entries_.empty())
        return Status(StatusCode::kResourceExhausted,
                      fmt::format("prompt cache: no memory for {} rows in host memory; they are not kept", n));
      used_ -= entries_.back().bytes();
      entries_.pop_back();
    }
  }
  DSPARK_TRY(kv->CopyPrefixFrom(from, seq, 0, n));
  Entry entry{std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(kv), std::move(drafter)};
  const size_t bytes = entry.bytes();
  if (bytes > capacity_) return Status::Ok();
  while (used_ + bytes > capacity_ && !entries_.empty()) {
    used_ -= entries_.back().bytes();
    entries_.pop_back();
  }
  entries_.push_front(std::move(entry));
  used_ += bytes;
  return Status::Ok();
}

PromptStore::Match PromptStore::Find(std::span<const int32_t> prompt) {
  auto best = entries_.end();
  size_t best_rows = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const size_t rows = CommonPrefix(it->tokens, prompt);
    if (rows > best_rows) {
      best_rows = rows;
      best = it;
    }
  }
  if (best == entries_.end()) return {};
  entries_.splice(entries_.begin(), entries_, best);
  return {&entries_.front(), best_rows};
}

}  // namespace dspark
