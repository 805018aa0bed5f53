#include "model/draft_head.h"

namespace dspark {

HeadContext::HeadContext(const DraftHead& head, int n_cells) : cache_(head.CacheConfig(), 1, n_cells, head.CacheType()) {}

Status DraftHead::Check(const HeadJob& job) const {
  if (job.context == nullptr) return InvalidArgument("spec: {} job without a context", Name());
  if (job.tokens.empty()) return InvalidArgument("spec: {} job without rows", Name());
  if (job.state == nullptr) return InvalidArgument("spec: {} job without a state", Name());
  const KvCache& cache = job.context->cache();
  if (cache.Length(0) + static_cast<int64_t>(job.tokens.size()) > cache.n_ctx())
    return OutOfRange("spec: {} draft context full: {} rows + {} new exceed {}", Name(), cache.Length(0),
                      job.tokens.size(), cache.n_ctx());
  for (int32_t t : job.tokens)
    if (t < 0 || t >= n_vocab()) return InvalidArgument("spec: {} row token {} outside the vocabulary", Name(), t);
  return Status::Ok();
}

}  // namespace dspark
