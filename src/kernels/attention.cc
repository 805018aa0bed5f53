// Dispatch wrapper of ops::Attention; body in attention-inl.h.
#include "kernels/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/attention-inl.h"

#if HWY_ONCE
#include "kernels/ops.h"
#include "util/status.h"

namespace dspark {
HWY_EXPORT(AttentionImpl);
HWY_EXPORT(AttentionScratchImpl);

namespace ops {
void Attention(const float* q, int64_t q_stride, int n_q, int heads_per_row, int head_dim, int head_dim_v,
               DType kv_type, const void* kt, const void* v, int64_t v_stride, int n, int shared,
               const uint8_t* visible, float scale, const float* sinks, float* scratch, float* out,
               int64_t out_stride) {
  DSPARK_CHECK_MSG(kv_type == DType::kF32 || kv_type == DType::kF16 || kv_type == DType::kQ8_0,
                   "Attention: K/V must be F32, F16 or Q8_0");
  DSPARK_CHECK_MSG(kv_type != DType::kQ8_0 || (head_dim % kAttentionQ8Block == 0 && head_dim_v % kAttentionQ8Block == 0 &&
                                               v_stride % kAttentionQ8Block == 0),
                   "Attention: Q8_0 K/V need head sizes and a value stride that are multiples of 32");
  DSPARK_CHECK_MSG(heads_per_row > 0 && n_q % heads_per_row == 0, "Attention: n_q must be whole rows");
  DSPARK_CHECK_MSG(shared >= 0 && shared <= n && (shared == n || visible != nullptr),
                   "Attention: cells past `shared` need `visible`");
  HWY_DYNAMIC_DISPATCH(AttentionImpl)(q, q_stride, n_q, heads_per_row, head_dim, head_dim_v, kv_type, kt, v, v_stride,
                                      n, shared, visible, scale, sinks, scratch, out, out_stride);
}

int64_t AttentionScratch(int n_q, int n, int head_dim) {
  return HWY_DYNAMIC_DISPATCH(AttentionScratchImpl)(n_q, n, head_dim);
}
}  // namespace ops
}  // namespace dspark
#endif  // HWY_ONCE
