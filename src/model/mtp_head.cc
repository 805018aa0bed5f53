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
  const size_t d = static_cast<size_t>(target_.config().n_embd);
  // Every job's rows in one pass: job j is batch sequence j, its K/V in its own context's cache.
  batch_.rows.clear();
  batch_.mask.clear();
  caches_.clear();
  h_.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const HeadJob& job = jobs[j];
    const int n = static_cast<int>(job.tokens.size());
    const int p0 = job.context->cache().Length(0);
    for (int i = 0; i < n; ++i)
      batch_.rows.push_back({job.tokens[i], p0 + i, static_cast<int32_t>(j), job.out != nullptr && i == n - 1});
    caches_.push_back(&job.context->cache());
    h_.insert(h_.end(), job.state, job.state + n * d);
  }
  if (batch_.rows.empty()) return Status::Ok();
  DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, target_.ForwardNextn(batch_, h_.data(), caches_, pool));
  const size_t n_vocab = static_cast<size_t>(target_.config().n_vocab);
  for (size_t k = 0; k < out.logit_rows.size(); ++k) {
    HeadOutput* o = jobs[batch_.rows[out.logit_rows[k]].seq].out;
    o->state.assign(out.hidden.begin() + k * d, out.hidden.begin() + (k + 1) * d);
    o->logits.assign(out.logits.begin() + k * n_vocab, out.logits.begin() + (k + 1) * n_vocab);
  }
  return Status::Ok();
}

}  // namespace dspark
