// Dispatch wrapper of ops::AttentionGroup; body in attention-inl.h.
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
HWY_EXPORT(AttentionGroupImpl);

namespace ops {
void AttentionGroup(const float* q, int n_q, int head_dim, int head_dim_v, DType kv_type, const void* k,
                    int64_t k_stride, const void* v, int64_t v_stride, const int32_t* cells, int n, float scale,
                    const float* sinks, float* scores, float* out) {
  DSPARK_CHECK_MSG(kv_type == DType::kF32 || kv_type == DType::kF16, "AttentionGroup: K/V must be F32 or F16");
  HWY_DYNAMIC_DISPATCH(AttentionGroupImpl)(q, n_q, head_dim, head_dim_v, kv_type, k, k_stride, v, v_stride, cells, n,
                                           scale, sinks, scores, out);
}
}  // namespace ops
}  // namespace dspark
#endif  // HWY_ONCE
