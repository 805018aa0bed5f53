// Loading a model and its batched forward pass (the layer loop of llama / qwen2 / qwen3 / qwen3moe).
#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "kernels/ops.h"
#include "model/arch/arch.h"
#include "model/mla.h"
#include "model/moe.h"
#include "util/log.h"

namespace dspark {

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, const ModelOptions& options) {
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::Open(path));
  return FromFile(std::shared_ptr<const gguf::File>(std::move(file)), options);
}

Result<std::unique_ptr<Model>> Model::FromFile(std::shared_ptr<const gguf::File> file, const ModelOptions& options) {
  DSPARK_ASSIGN_OR_RETURN(std::string arch, file->GetString("general.architecture"));
  const ArchDescriptor* desc = FindArch(arch);
  if (desc == nullptr) {
    std::string known;
    for (std::string_view a : KnownArchs()) known += (known.empty() ? "" : ", ") + std::string(a);
    return Unimplemented("model: {}: unknown architecture '{}' (dspark runs: {})", file->path(), arch, known);
  }
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  DSPARK_ASSIGN_OR_RETURN(m->config_, desc->read_config(*m->file_));
  std::vector<std::string> unclaimed;
  DSPARK_ASSIGN_OR_RETURN(m->weights_, BindDenseWeights(*m->file_, m->config_, &unclaimed));
  for (const std::string& name : unclaimed) DSPARK_LOG_WARN("model: tensor '{}' is not used by {}", name, arch);
  if (options.repack) {
    // Every matrix MatMul reads; tok_embd only through `output` when tied (lookups read rows).
    // Projections that read the same activations are fused (one MatMul each) where they can be;
    // the others are packed on their own.
    ModelWeights& w = m->weights_;
    std::vector<ops::WeightView> from_file;  // the file's rows of every matrix this replaces
    std::vector<ops::WeightView*> views = {&w.output};
    // Packs gate and up as one matrix where it can, else each on its own.
    auto gate_up = [&](ops::WeightView& gate, ops::WeightView& up, ops::WeightView& fused) {
      if (m->packed_.PackFused({&gate, &up}, &fused))
        from_file.insert(from_file.end(), {gate, up});
      else
        views.insert(views.end(), {&gate, &up});
    };
    for (LayerWeights& l : w.layers) {
      if (l.wkv_a.rows > 0) {  // MLA
        for (ops::WeightView* v : {&l.wq, &l.wq_a, &l.wq_b, &l.wkv_a})
          if (v->rows > 0) views.push_back(v);
        for (auto* heads : {&l.wk_b, &l.wv_b})
          for (ops::WeightView& v : *heads) views.push_back(&v);
      } else if (m->packed_.PackFused({&l.wq, &l.wk, &l.wv}, &l.wqkv)) {
        from_file.insert(from_file.end(), {l.wq, l.wk, l.wv});
      } else {
        for (ops::WeightView* v : {&l.wq, &l.wk, &l.wv}) views.push_back(v);
      }
      views.push_back(&l.wo);
      if (l.gate_shexp.rows > 0) {
        gate_up(l.gate_shexp, l.up_shexp, l.gate_up_shexp);
        views.push_back(&l.down_shexp);
      }
      if (!l.gate_exps.empty()) {
        views.push_back(&l.router);
        l.gate_up_exps.resize(l.gate_exps.size());
        for (size_t e = 0; e < l.gate_exps.size(); ++e) {
          gate_up(l.gate_exps[e], l.up_exps[e], l.gate_up_exps[e]);
          views.push_back(&l.down_exps[e]);
        }
        continue;
      }
      gate_up(l.w_gate, l.w_up, l.w_gate_up);
      views.push_back(&l.w_down);
    }
    for (const ops::WeightView* v : views) from_file.push_back(*v);
    for (NextnWeights& x : w.nextn)
      for (ops::WeightView* v : {&x.eh_proj, &x.embed_tokens, &x.shared_head_head})
        if (v->rows > 0 && v != &x.embed_tokens) views.push_back(v);
    const void* output_rows = w.output.data;
    m->packed_.Pack(views);
    // Types without a packed layout here keep their row layout, in memory on huge pages too.
    m->packed_.CopyUnpacked(views);
    if (w.tok_embd.data == output_rows) {
      w.tok_embd.data = w.output.data;  // the copy, if the tied matrix was copied
      w.tok_embd.packed = w.output.packed;
    }
    // Every MatMul now reads the copies: drop the file's pages of the matrices they replace from
    // this process, or a model would count twice in its memory. A token embedding still read from
    // the file stays: lookups read its rows.
    for (const ops::WeightView& v : from_file)
      if (v.data != nullptr && v.data != w.tok_embd.data)
        m->file_->ReleasePages(v.data, static_cast<uint64_t>(RowBytes(v.type, v.cols)) * v.rows);
  }
  m->rope_ = std::make_unique<Rope>(m->config_.rope);
  DSPARK_TRY(m->file_->CheckUnchanged());
  return m;
}

uint64_t Model::WeightBytesPerToken() const {
  auto bytes = [](const ops::WeightView& w) { return static_cast<uint64_t>(RowBytes(w.type, w.cols)) * w.rows; };
  uint64_t total = bytes(weights_.output) + RowBytes(weights_.tok_embd.type, weights_.tok_embd.cols);
  const int used = config_.moe.n_expert_used;
  for (int il = 0; il < config_.n_layer; ++il) {  // the trunk's: a decode step runs no nextn block
    const LayerWeights& l = weights_.layers[il];
    total += bytes(l.wq) + bytes(l.wk) + bytes(l.wv) + bytes(l.wo) + bytes(l.w_gate) + bytes(l.w_up) + bytes(l.w_down);
    // A token reads the router and its n_expert_used experts.
    if (!l.gate_exps.empty())
      total += bytes(l.router) + used * (bytes(l.gate_exps[0]) + bytes(l.up_exps[0]) + bytes(l.down_exps[0]));
    total += bytes(l.gate_shexp) + bytes(l.up_shexp) + bytes(l.down_shexp);
    total += bytes(l.wq_a) + bytes(l.wq_b) + bytes(l.wkv_a);
    for (const auto* heads : {&l.wk_b, &l.wv_b})
      for (const ops::WeightView& v : *heads) total += bytes(v);
  }
  return total;
}

Status Model::ValidateBatch(const Batch& batch, std::span<KvCache* const> caches, std::span<const int> slots) const {
  const int n = batch.size();
  if (n == 0) return InvalidArgument("model: empty batch");
  if (!batch.mask.empty() && batch.mask.size() != static_cast<size_t>(n) * n)
    return InvalidArgument("model: batch mask has {} entries, expected {} x {}", batch.mask.size(), n, n);
  const int n_seq = static_cast<int>(caches.size());
  std::vector<int> added(n_seq, 0);
  for (int i = 0; i < n; ++i) {
    const BatchRow& r = batch.rows[i];
    if (r.seq < 0 || r.seq >= n_seq)
      return InvalidArgument("model: sequence {} at batch row {} is outside [0, {})", r.seq, i, n_seq);
    DSPARK_TRY(caches[r.seq]->CheckSeq(slots[r.seq]));
    if (r.token < 0 || r.token >= config_.n_vocab)
      return InvalidArgument("model: token id {} at batch row {} is outside the vocabulary [0, {})", r.token, i,
                             config_.n_vocab);
    if (r.pos < 0) return InvalidArgument("model: negative position {} at batch row {}", r.pos, i);
    ++added[r.seq];
  }
  for (int s = 0; s < n_seq; ++s) {
    const KvCache& cache = *caches[s];
    if (cache.Length(slots[s]) + added[s] > cache.n_ctx())
      return OutOfRange("model: context full: sequence {} holds {} tokens, {} more would exceed the context of {}",
                        s, cache.Length(slots[s]), added[s], cache.n_ctx());
  }
  return Status::Ok();
}

namespace {

// Per-call scratch, sized for n rows. Reused across calls to avoid allocation on the hot path.
struct Scratch {
  std::vector<float> x, h, q, k, v, att, tmp, gate, up, cos_t, sin_t, fused;
  void Resize(const ModelConfig& c, int n) {
    const size_t rows = static_cast<size_t>(n);
    x.resize(rows * c.n_embd);
    h.resize(rows * c.n_embd);
    q.resize(rows * c.q_dim());
    k.resize(rows * c.kv_dim());
    v.resize(rows * c.v_dim());
    att.resize(rows * c.n_head * c.head_dim_v);
    tmp.resize(rows * c.n_embd);
    const size_t n_ff = static_cast<size_t>(c.dense_ffn_width());
    gate.resize(rows * n_ff);
    up.resize(rows * n_ff);
    fused.resize(rows * std::max<size_t>(c.q_dim() + c.kv_dim() + c.v_dim(), 2 * n_ff));
    cos_t.resize(rows * c.rope.n_rot / 2);
    sin_t.resize(rows * c.rope.n_rot / 2);
  }
};

void AddBias(const std::vector<float>& bias, int n, float* y) {
  if (bias.empty()) return;
  const int64_t d = static_cast<int64_t>(bias.size());
  for (int i = 0; i < n; ++i) ops::Add(bias.data(), d, y + i * d);
}

void RmsNormRows(const float* x, const std::vector<float>& w, float eps, int n, int64_t d, float* y, ThreadPool& pool) {
  pool.ParallelRange(n, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) ops::RmsNorm(x + i * d, w.data(), eps, d, y + i * d);
  });
}


// Rows of one sequence that one ops::Attention call serves (consecutive in the batch): their heads
// share every key tile load. A row's result does not depend on which unit it lands in.
struct AttentionUnit {
  int first = 0, rows = 0;        // batch rows [first, first + rows)
  int n = 0, shared = 0;          // cells [0, n) of the sequence; every row sees [0, shared)
  std::vector<uint8_t> visible;   // [rows][n - shared]
};

// visible[i]: the cells row i sees in ascending order, its sequence's committed prefix (prefix[i]
// cells) first. A verification block (up to kMaxBlockUnitRows rows of a sequence) is one unit of
// up to kMaxBlockUnitHeads query heads, so it reads the sequence's K/V once; longer runs of rows
// (prefill chunks) take units of ~16 heads (one AVX-512 vector of keys per head and tile row).
// With 16-head units a 9-row block (n-max 8) of a model with 2 query heads per K/V head would
// take two units and sweep the cache twice; as one unit it streams the cache once.
constexpr int kMaxBlockUnitRows = 16;
constexpr int kMaxBlockUnitHeads = 48;

std::vector<AttentionUnit> PlanAttention(const Batch& batch, const std::vector<std::vector<int32_t>>& visible,
                                         const std::vector<int>& prefix, int group) {
  const int n = batch.size();
  std::vector<AttentionUnit> units;
  for (int i = 0; i < n;) {
    AttentionUnit u;
    u.first = i;
    int run = 0;  // this sequence's consecutive rows from here
    while (i + run < n && batch.rows[i + run].seq == batch.rows[u.first].seq) ++run;
    const int per_unit =
        run <= kMaxBlockUnitRows ? std::min(run, std::max(1, kMaxBlockUnitHeads / group)) : std::max(1, 16 / group);
    while (i < n && u.rows < per_unit && batch.rows[i].seq == batch.rows[u.first].seq) ++i, ++u.rows;
    u.shared = prefix[u.first];
    u.n = u.shared;
    for (int r = 0; r < u.rows; ++r)
      if (!visible[u.first + r].empty()) u.n = std::max(u.n, visible[u.first + r].back() + 1);
    u.visible.assign(static_cast<size_t>(u.rows) * (u.n - u.shared), 0);
    bool all = true;
    for (int r = 0; r < u.rows; ++r) {
      const auto& vis = visible[u.first + r];
      int seen = 0;
      for (size_t t = u.shared; t < vis.size(); ++t, ++seen) u.visible[r * (u.n - u.shared) + vis[t] - u.shared] = 1;
      all = all && seen == u.n - u.shared;
    }
    if (all) u.shared = u.n, u.visible.clear();  // e.g. one decode row: no mask to apply
    units.push_back(std::move(u));
  }
  return units;
}

// Charges the time since the previous mark to a phase of a ForwardProfile (no-op without one).
class PhaseClock {
 public:
  explicit PhaseClock(ForwardProfile* profile) : profile_(profile) {
    if (profile_ != nullptr) last_ = std::chrono::steady_clock::now();
  }
  void Mark(ForwardProfile::Phase phase) {
    if (profile_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    profile_->ms[phase] += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }

 private:
  ForwardProfile* profile_;
  std::chrono::steady_clock::time_point last_;
};

// A SwiGLU feed-forward block of width n_ff on s.h, added to s.x: the dense FFN, or DeepSeek's
// shared experts.
void SwiGlu(const ops::WeightView& gate, const ops::WeightView& up, const ops::WeightView& down,
            const ops::WeightView& gate_up, int n_ff, int n, int64_t d, Scratch& s, PhaseClock& clock, ThreadPool& pool) {
  s.gate.resize(static_cast<size_t>(n) * n_ff);
  s.up.resize(static_cast<size_t>(n) * n_ff);
  s.fused.resize(std::max(s.fused.size(), static_cast<size_t>(n) * 2 * n_ff));
  if (gate_up.rows > 0) {
    ops::MatMul(gate_up, s.h.data(), n, s.fused.data(), pool);
    clock.Mark(ForwardProfile::kGateUp);
    // Up to 16 rows (decode, verification blocks) on the calling thread, as the q/k norm and
    // rope phase: split over two threads, the hand-off and reading the other core's half of the
    // gate/up output cost more than the work of so few rows.
    pool.ParallelRange(n, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        const float* gu = s.fused.data() + static_cast<size_t>(i) * 2 * n_ff;
        ops::SiluMul(gu, gu + n_ff, n_ff, s.gate.data() + static_cast<size_t>(i) * n_ff);
      }
    });
  } else {
    ops::MatMul(gate, s.h.data(), n, s.gate.data(), pool);
    ops::MatMul(up, s.h.data(), n, s.up.data(), pool);
    clock.Mark(ForwardProfile::kGateUp);
    ops::SiluMul(s.gate.data(), s.up.data(), static_cast<int64_t>(n) * n_ff, s.gate.data());
  }
  clock.Mark(ForwardProfile::kSwiglu);
  ops::MatMul(down, s.gate.data(), n, s.tmp.data(), pool);
  ops::Add(s.tmp.data(), static_cast<int64_t>(n) * d, s.x.data());
  clock.Mark(ForwardProfile::kDown);
}

}  // namespace

const char* ForwardProfile::Name(int phase) {
  static const char* const kNames[kNumPhases] = {"setup", "norm", "qkv", "rope+kv", "attention",
                                                 "attn out", "gate/up", "swiglu", "down", "head"};
  return phase >= 0 && phase < kNumPhases ? kNames[phase] : "?";
}

double ForwardProfile::TotalMs() const {
  double t = 0;
  for (double v : ms) t += v;
  return t;
}

Result<ForwardOutput> Model::Forward(const Batch& batch, KvCache& cache, ThreadPool& pool,
                                     const ForwardOptions& options) {
  for (int t : options.tap_layers)
    if (t < 0 || t > config_.n_layer)
      return InvalidArgument("model: tap layer {} out of range [0, {}]", t, config_.n_layer);
  // Every sequence in the one cache: slot s of `cache` (kept per thread, a pass allocates nothing here).
  thread_local std::vector<KvCache*> caches;
  thread_local std::vector<int> slots;
  caches.assign(cache.n_seq(), &cache);
  slots.resize(cache.n_seq());
  std::iota(slots.begin(), slots.end(), 0);
  return Pass(batch, /*nextn_h=*/nullptr, caches, slots, pool, options);
}

ModelConfig Model::NextnCacheConfig() const {
  ModelConfig c = config_;
  c.n_layer = 1;
  c.n_nextn = 0;
  return c;
}

Result<ForwardOutput> Model::ForwardNextn(const Batch& batch, const float* h, std::span<KvCache* const> caches,
                                          ThreadPool& pool) const {
  if (config_.n_nextn < 1)
    return InvalidArgument("model: {}: no multi-token-prediction block ({}.nextn_predict_layers is 0)",
                           file_->path(), config_.arch);
  if (h == nullptr) return InvalidArgument("model: a nextn pass needs the h of every row");
  for (const KvCache* c : caches)
    if (c == nullptr || c->n_seq() != 1) return InvalidArgument("model: a nextn pass takes one-sequence caches");
  const std::vector<int> slots(caches.size(), 0);
  return Pass(batch, h, caches, slots, pool, {});
}

Result<ForwardOutput> Model::Pass(const Batch& batch, const float* nextn_h, std::span<KvCache* const> caches,
                                  std::span<const int> slots, ThreadPool& pool, const ForwardOptions& options) const {
  PhaseClock clock(options.profile);
  DSPARK_TRY(ValidateBatch(batch, caches, slots));
  const ModelConfig& c = config_;
  const int n = batch.size();

  // Cell of each row, and the cells each row may attend beyond its sequence's committed prefix.
  std::vector<int> cell(n), prefix(n);
  const int n_seq = static_cast<int>(caches.size());
  std::vector<int> added(n_seq, 0);
  for (int i = 0; i < n; ++i) {
    const int s = batch.rows[i].seq;
    prefix[i] = caches[s]->Length(slots[s]);
    cell[i] = prefix[i] + added[s]++;
  }
  // Cells each row attends: its sequence's committed prefix, then the batch rows it may see.
  std::vector<std::vector<int32_t>> visible(n);
  for (int i = 0; i < n; ++i) {
    visible[i].resize(prefix[i]);
    std::iota(visible[i].begin(), visible[i].end(), 0);
    for (int j = 0; j < n; ++j) {
      if (batch.rows[j].seq != batch.rows[i].seq) continue;
      const bool vis = batch.mask.empty() ? j <= i : batch.mask[static_cast<size_t>(i) * n + j] != 0;
      if (vis) visible[i].push_back(cell[j]);
    }
  }

  // Per calling thread (a reference, so worker threads in the lambdas below see the caller's).
  thread_local Scratch tls_scratch;
  Scratch& s = tls_scratch;
  s.Resize(c, n);
  const int64_t d = c.n_embd;
  const int half_rot = c.rope.n_rot / 2;

  // The trunk's blocks, or the first multi-token-prediction block (its K/V in the cache's layer 0).
  const NextnWeights* nextn = nextn_h != nullptr ? &weights_.nextn[0] : nullptr;
  const int layer0 = nextn != nullptr ? c.n_layer : 0;
  const int n_pass_layers = nextn != nullptr ? 1 : c.n_layer;
  const ops::WeightView& e = nextn != nullptr && nextn->embed_tokens.rows > 0 ? nextn->embed_tokens : weights_.tok_embd;
  for (int i = 0; i < n; ++i) {
    const uint8_t* row = static_cast<const uint8_t*>(e.data) + RowBytes(e.type, e.cols) * batch.rows[i].token;
    ops::DequantizeRow(e.type, row, s.x.data() + i * d, d);
    rope_->Angles(batch.rows[i].pos, s.cos_t.data() + i * half_rot, s.sin_t.data() + i * half_rot);
  }
  if (nextn != nullptr) {
    // x = eh_proj([enorm(embedding) ; hnorm(h)]), as llama.cpp's deepseek2 MTP graph.
    thread_local std::vector<float> eh;
    eh.resize(static_cast<size_t>(n) * 2 * d);
    for (int i = 0; i < n; ++i) {
      ops::RmsNorm(s.x.data() + i * d, nextn->enorm.data(), c.rms_eps, d, eh.data() + i * 2 * d);
      ops::RmsNorm(nextn_h + i * d, nextn->hnorm.data(), c.rms_eps, d, eh.data() + i * 2 * d + d);
    }
    ops::MatMul(nextn->eh_proj, eh.data(), n, s.x.data(), pool);
  }

  ForwardOutput out;
  out.taps.resize(options.tap_layers.size());
  auto tap = [&](int layer) {
    for (size_t t = 0; t < options.tap_layers.size(); ++t)
      if (options.tap_layers[t] == layer) out.taps[t].assign(s.x.begin(), s.x.begin() + n * d);
  };

  const int group = c.n_head / c.n_head_kv;
  const float scale = c.mla.enabled() ? c.mla.kq_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const std::vector<AttentionUnit> units = PlanAttention(batch, visible, prefix, group);
  clock.Mark(ForwardProfile::kSetup);

  // il: the block's layer in the cache; wl: its weights (and whether it is a mixture).
  for (int il = 0; il < n_pass_layers; ++il) {
    const int wl = layer0 + il;
    const LayerWeights& L = weights_.layers[wl];
    tap(il);

    // Attention block.
    RmsNormRows(s.x.data(), L.attn_norm, c.rms_eps, n, d, s.h.data(), pool);
    clock.Mark(ForwardProfile::kNorm);
    if (c.mla.enabled()) {
      MlaQueries(c, L, *rope_, s.h.data(), n, s.cos_t.data(), s.sin_t.data(), s.q.data(), s.k.data(), pool);
      for (int i = 0; i < n; ++i) {
        const int seq = batch.rows[i].seq;
        const float* kv = s.k.data() + static_cast<size_t>(i) * c.kv_dim();  // the latent is key and value
        caches[seq]->Write(il, slots[seq], cell[i], kv, kv);
      }
      clock.Mark(ForwardProfile::kQkv);
    } else if (L.wqkv.rows > 0) {
      ops::MatMul(L.wqkv, s.h.data(), n, s.fused.data(), pool);
      ops::SplitColumns(s.fused.data(), n, {{c.q_dim(), s.q.data()}, {c.kv_dim(), s.k.data()}, {c.v_dim(), s.v.data()}});
    } else {
      ops::MatMul(L.wq, s.h.data(), n, s.q.data(), pool);
      ops::MatMul(L.wk, s.h.data(), n, s.k.data(), pool);
      ops::MatMul(L.wv, s.h.data(), n, s.v.data(), pool);
    }
    if (!c.mla.enabled()) {
    AddBias(L.bq, n, s.q.data());
    AddBias(L.bk, n, s.k.data());
    AddBias(L.bv, n, s.v.data());
    clock.Mark(ForwardProfile::kQkv);
    // At least 16 rows per range: a verification block stays on one thread. Split over two threads,
    // a block's q/k norm, rope and KV write get slower, not faster: neighbouring cells share the
    // cache lines of a K tile, so both threads would write the same lines.
    pool.ParallelRange(n, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        float* q = s.q.data() + i * c.q_dim();
        float* k = s.k.data() + i * c.kv_dim();
        if (c.traits.qk_norm) {
          for (int hh = 0; hh < c.n_head; ++hh)
            ops::RmsNorm(q + hh * c.head_dim, L.q_norm.data(), c.rms_eps, c.head_dim, q + hh * c.head_dim);
          for (int hh = 0; hh < c.n_head_kv; ++hh)
            ops::RmsNorm(k + hh * c.head_dim, L.k_norm.data(), c.rms_eps, c.head_dim, k + hh * c.head_dim);
        }
        rope_->Apply(s.cos_t.data() + i * half_rot, s.sin_t.data() + i * half_rot, c.n_head, c.head_dim, q);
        rope_->Apply(s.cos_t.data() + i * half_rot, s.sin_t.data() + i * half_rot, c.n_head_kv, c.head_dim, k);
        const int seq = batch.rows[i].seq;
        caches[seq]->Write(il, slots[seq], cell[i], k, s.v.data() + i * c.v_dim());
      }
    });
    }
    clock.Mark(ForwardProfile::kRope);

    // One task per (K/V head, unit): the group's query heads are contiguous in q and in att. Tasks
    // run head-major so consecutive units of a sequence reuse one head's K/V (contiguous in the
    // cache) from L2 instead of streaming it from memory once per unit.
    const int64_t n_units = static_cast<int64_t>(units.size());
    pool.ParallelFor(n_units * c.n_head_kv, [&](int64_t task, int) {
      const int kvh = static_cast<int>(task / n_units);
      const AttentionUnit& u = units[task % n_units];
      const int seq = batch.rows[u.first].seq;
      const KvCache& cache = *caches[seq];
      const int slot = slots[seq];
      thread_local std::vector<float> scratch;
      scratch.resize(static_cast<size_t>(ops::AttentionScratch(u.rows * group, u.n, c.head_dim)));
      ops::Attention(s.q.data() + static_cast<size_t>(u.first) * c.q_dim() + static_cast<size_t>(kvh) * group * c.head_dim,
                     c.q_dim(), u.rows * group, group, c.head_dim, c.head_dim_v, cache.type(), cache.KTiles(il, slot, kvh),
                     cache.V(il, slot, kvh, 0), c.head_dim_v, u.n, u.shared, u.visible.empty() ? nullptr : u.visible.data(),
                     scale, /*sinks=*/nullptr, scratch.data(),
                     s.att.data() + static_cast<size_t>(u.first) * c.n_head * c.head_dim_v +
                         static_cast<size_t>(kvh) * group * c.head_dim_v,
                     static_cast<int64_t>(c.n_head) * c.head_dim_v);
    });
    clock.Mark(ForwardProfile::kAttention);
    if (c.mla.enabled()) {
      MlaOutput(c, L, s.att.data(), n, s.x.data(), pool);
    } else {
      ops::MatMul(L.wo, s.att.data(), n, s.tmp.data(), pool);
      ops::Add(s.tmp.data(), static_cast<int64_t>(n) * d, s.x.data());
    }
    clock.Mark(ForwardProfile::kAttnOut);

    // Feed-forward block (SwiGLU, or a mixture of SwiGLU experts).
    RmsNormRows(s.x.data(), L.ffn_norm, c.rms_eps, n, d, s.h.data(), pool);
    clock.Mark(ForwardProfile::kNorm);
    if (c.moe.Layer(wl)) {
      out.experts_read += MoeFfn(c.moe, L, s.h.data(), n, d, s.x.data(), pool);
      if (c.moe.n_shared > 0)
        SwiGlu(L.gate_shexp, L.up_shexp, L.down_shexp, L.gate_up_shexp, c.moe.n_shared * c.moe.n_ff_exp, n, d, s, clock,
               pool);
      clock.Mark(ForwardProfile::kDown);
      continue;
    }
    SwiGlu(L.w_gate, L.w_up, L.w_down, L.w_gate_up, c.n_ff, n, d, s, clock, pool);
  }
  tap(n_pass_layers);

  // Final norm and LM head, only for rows that asked for logits.
  for (int i = 0; i < n; ++i)
    if (batch.rows[i].logits) out.logit_rows.push_back(i);
  const int n_out = static_cast<int>(out.logit_rows.size());
  if (n_out > 0) {
    const std::vector<float>& norm =
        nextn != nullptr && !nextn->shared_head_norm.empty() ? nextn->shared_head_norm : weights_.output_norm;
    const ops::WeightView& head =
        nextn != nullptr && nextn->shared_head_head.rows > 0 ? nextn->shared_head_head : weights_.output;
    for (int k = 0; k < n_out; ++k)
      ops::RmsNorm(s.x.data() + out.logit_rows[k] * d, norm.data(), c.rms_eps, d, s.h.data() + k * d);
    out.logits.resize(static_cast<size_t>(n_out) * c.n_vocab);
    ops::MatMul(head, s.h.data(), n_out, out.logits.data(), pool);
    if (nextn != nullptr) out.hidden.assign(s.h.begin(), s.h.begin() + static_cast<size_t>(n_out) * d);
  }
  clock.Mark(ForwardProfile::kHead);
  if (options.profile != nullptr) ++options.profile->passes;
  for (int seq = 0; seq < n_seq; ++seq)
    if (added[seq] > 0) caches[seq]->Advance(slots[seq], added[seq]);
  return out;
}

}  // namespace dspark
