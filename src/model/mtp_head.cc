#include "model/mtp_head.h"

#include "kernels/ops.h"

namespace dspark {

Result<std::unique_ptr<MtpHead>> MtpHead::Create(const Model& target) {
  const ModelConfig& c = target.config();
  if (c.n_nextn < 1)
    return InvalidArgument("spec: draft-mtp needs a model with a multi-token-prediction block; {} ({}) has none "
                           "({}.nextn_predict_layers is 0 or missing)",
                           target.file().path(), c.arch, c.arch);
  return std::unique_ptr<MtpHead>(new MtpHead(target));
}

void MtpHead::Fuse(std::span<const float* const> taps, int n, float* state, ThreadPool& pool) {
  const ModelConfig& c = target_.config();
  const int64_t d = c.n_embd;
  const std::vector<float>& norm = target_.weights().output_norm;
  pool.ParallelRange(n, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) ops::RmsNorm(taps[0] + i * d, norm.data(), c.rms_eps, d, state + i * d);
  });
}

Status MtpHead::Run(std::span<const HeadJob> jobs, ThreadPool& pool) {
  for (const HeadJob& job : jobs) DSPARK_TRY(Check(job));
  const int64_t d = target_.config().n_embd;
  for (const HeadJob& job : jobs) {
    KvCache& cache = job.context->cache();
    const int n = static_cast<int>(job.tokens.size());
    const int p0 = cache.Length(0);
    batch_.rows.clear();
    batch_.mask.clear();
    for (int i = 0; i < n; ++i) batch_.rows.push_back({job.tokens[i], p0 + i, 0, job.out != nullptr && i == n - 1});
    DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, target_.ForwardNextn(batch_, job.state, cache, pool));
    if (job.out != nullptr) {
      job.out->state.assign(out.hidden.begin(), out.hidden.begin() + d);
      job.out->logits = std::move(out.logits);
    }
  }
  return Status::Ok();
}

}  // namespace dspark
