// The small ops API the model code calls: quantised matrix multiplication and the elementwise
// ops of a transformer layer. Each op dispatches once per call to the best SIMD target of this
// CPU (Highway: AVX-512 incl. VNNI, AVX2, NEON, scalar) and has a plain scalar twin in
// kernels/ref/ that the tests compare against. No op allocates on the hot path or keeps globals.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "util/dtype.h"
#include "util/thread_pool.h"

namespace dspark::ops {

// A weight matrix stored as ggml stores it: `rows` rows of `cols` elements each, every row
// RowBytes(type, cols) bytes, rows contiguous. A PyTorch Linear [out, in] has rows = out.
struct WeightView {
  const void* data = nullptr;
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  // Optional copy of the same matrix in this CPU's packed layout (PackWeights), which MatMul then
  // reads instead of `data`. `data` stays valid: embedding lookups and other targets use it.
  const void* packed = nullptr;
};

// Bytes of the packed layout of a rows x cols matrix of `type` on this CPU, or 0 when this CPU has
// no packed kernel for the type: F32, F16 and BF16 everywhere (kernels/matmul_float-inl.h,
// matmul_bf16-inl.h), every quantised type on x86 with AVX2 or better (kernels/matmul_packed*-inl.h:
// vpdpbusd with AVX-512 VNNI, vpmaddubsw with AVX2; one layout, bitwise the same outputs). Packed
// kernels read 16 weight rows per vector instead of one.
size_t PackedBytes(DType type, int64_t rows, int64_t cols);
// Writes the packed layout of w to dst (64-byte aligned, PackedBytes(w.type, w.rows, w.cols) bytes).
void PackWeights(const WeightView& w, void* dst, ThreadPool& pool);

// How MatMul multiplies BF16 weights on this CPU: "vdpbf16ps" (AVX-512 BF16 on AMD) or "f32 FMA".
const char* Bf16MatMulKernel();

// Types MatMul accepts as weights.
bool MatMulSupports(DType type);

// y[m, w.rows] = x[m, w.cols] · wᵀ   (row-major float32 x and y; y may not alias x).
// Weights are streamed from memory once per call whatever m is (all m activation rows are
// applied to each weight block while it is in cache), so verifying k draft tokens costs little
// more than decoding one. For quantised w, x is quantised once per call to the activation
// format that type pairs with (Q8_0 or Q8_K), as llama.cpp does; for BF16 w, x is rounded to
// bf16 (llama.cpp's pairing too), which lets CPUs with AVX-512 BF16 use vdpbf16ps. Work is split over the pool's
// threads by tiles of 8 output rows; activations are quantised in parallel by 16-row tiles.
// Results equal ref::MatMulRef (kernels/ref/matmul_ref.h) up to float rounding of the per-block
// products: the integer block sums are exact on every target.
// Scratch is thread_local and grow-only: no allocation after warm-up, and concurrent calls from
// different threads (each with its own pool) are safe. w.cols must be a multiple of the type's
// block size (32 or 256); x and y are row-major with row strides w.cols and w.rows.
void MatMul(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool);

// Converts n elements (a multiple of the type's block size) of a row to float32.
void DequantizeRow(DType type, const void* src, float* dst, int64_t n);
// Reference quantiser (round-to-nearest as ggml's quantize_row_*_ref): F32, F16, BF16, Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_K. Returns false for other types.
bool QuantizeRow(DType type, const float* src, void* dst, int64_t n);
bool CanQuantize(DType type);

// y = x / sqrt(mean(x²) + eps) * weight  over n elements; y may alias x.
void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* y);
// In-place softmax over n elements (max-subtracted; -inf entries become 0).
void Softmax(float* x, int64_t n);
// Index of the largest of n > 0 elements (the first, on ties) and, if prob is not null,
// softmax(x) at that index, without writing the distribution.
int64_t ArgMax(const float* x, int64_t n, float* prob = nullptr);
// out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);
// y[i] += x[i]
void Add(const float* x, int64_t n, float* y);
// y_j[i] = columns [offset_j, offset_j + width_j) of row i of x ([n][Σ width]): the outputs of a
// fused projection (PackedWeights::PackFused) back into one array per projection.
void SplitColumns(const float* x, int64_t n, std::initializer_list<std::pair<int64_t, float*>> parts);
// Σ a[i]·b[i]
float Dot(const float* a, const float* b, int64_t n);
// y[i] += alpha · x[i]
void Axpy(float alpha, const float* x, int64_t n, float* y);
// x[i] *= alpha
void Scale(float alpha, int64_t n, float* x);
// dst[i] = x[i] rounded to IEEE half (round to nearest even), as F16C's vcvtps2ph.
void ConvertToF16(const float* x, int64_t n, uint16_t* dst);

// Cells per key tile of the attention K layout: the keys of one head are stored as
// [tile][head_dim][kAttentionKeyTile] (element i of cell t at kt[(t / 32 * head_dim + i) * 32 + t % 32]).
inline constexpr int kAttentionKeyTile = 32;
// Q8_0 K/V (kv_type kQ8_0, head sizes a multiple of kAttentionQ8Block): a key tile is head_dim / 32
// blocks of [8 dimension quads][32 cells][4 dims] uint8 (q + 128: dimension 4i + j of cell c at
// byte 128i + 4c + j) followed by the 32 cells' f32 scales; a value row is head_dim_v / 32 blocks of
// {f32 scale, 32 int8}. Element = q * scale. Scores over Q8_0 keys quantise the (scaled) query to
// Q8_0 per head and 32 dimensions, as llama.cpp's q8_0 dot does, and sum q_query * q_key exactly in
// integers (vpdpbusd on AVX-512 VNNI; exact float sums elsewhere, the same numbers).
inline constexpr int kAttentionQ8Block = 32;
inline constexpr int kAttentionQ8KeyBlockBytes = kAttentionQ8Block * kAttentionKeyTile + kAttentionKeyTile * 4;
inline constexpr int kAttentionQ8ValueBlockBytes = 4 + kAttentionQ8Block;

// Attention of query rows of one sequence over cells 0..n-1 of one K/V head:
//   out[h] = Σ_t softmax_t(scale · q[h]·K_t) · V_t
// The n_q query heads are the heads_per_row heads (e.g. a GQA group) of n_q / heads_per_row rows:
// head h is q + (h / heads_per_row)·q_stride + (h % heads_per_row)·head_dim, and its output goes to
// out + (h / heads_per_row)·out_stride + (h % heads_per_row)·head_dim_v. kt: the head's keys in the
// tiled layout above; v: its values, row t at v + t·v_stride elements; both of kv_type (F32, F16,
// or Q8_0 in the block layouts above).
// Every row sees cells [0, shared); past that, row r sees cell t iff visible[r·(n − shared) + t −
// shared] (visible may be nullptr when shared == n). sinks (nullptr: none): one extra logit per head
// of a row (sinks[h % heads_per_row]) that takes part in the softmax but adds no value. A row that
// sees nothing gets zeros. scratch: AttentionScratch(n_q, n, head_dim) floats.
// A row's result is bitwise the same whichever other rows share the call, so a verification block
// reproduces decode exactly; key tiles are loaded once for every head of every row.
void Attention(const float* q, int64_t q_stride, int n_q, int heads_per_row, int head_dim, int head_dim_v,
               DType kv_type, const void* kt, const void* v, int64_t v_stride, int n, int shared,
               const uint8_t* visible, float scale, const float* sinks, float* scratch, float* out,
               int64_t out_stride);
int64_t AttentionScratch(int n_q, int n, int head_dim);

}  // namespace dspark::ops
