#include "speculative/planner.h"

#include <algorithm>

namespace dspark {

namespace {
// Context rows a probe's drafter reads before drafting (DraftParams::max_catch_up): enough for the
// next two tokens' local context, a fraction of the rows since the last probe.
constexpr int kProbeCatchUpRows = 32;
}  // namespace

std::vector<int> AdmitDraftSlots(const std::vector<std::vector<double>>& survival, int base_rows,
                                 double base_tokens, const CostModel& cost, int prompt_rows) {
  struct Slot {
    double survival;
    int seq, index;
  };
  std::vector<Slot> slots;
  for (size_t s = 0; s < survival.size(); ++s)
    for (size_t i = 0; i < survival[s].size(); ++i) slots.push_back({survival[s][i], static_cast<int>(s), static_cast<int>(i)});
  // Highest survival first; within a sequence survival never rises, and a stable sort keeps slot order on ties,
  // so every prefix of this order is a set of per-sequence prefixes.
  std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.survival > b.survival; });
  double expected = base_tokens;
  double best_rate = expected / DecodeShareMs(cost, base_rows, prompt_rows, 0);
  size_t best_len = 0;
  for (size_t n = 1; n <= slots.size(); ++n) {
    expected += slots[n - 1].survival;
    const double rate = expected / DecodeShareMs(cost, base_rows, prompt_rows, static_cast<int>(n));
    if (rate > best_rate) {
      best_rate = rate;
      best_len = n;
    }
  }
  std::vector<int> k(survival.size(), 0);
  for (size_t n = 0; n < best_len; ++n) k[slots[n].seq] = std::max(k[slots[n].seq], slots[n].index + 1);
  return k;
}

std::vector<std::vector<int>> AdmitLeaves(const std::vector<std::vector<double>>& survival, const std::vector<int>& k,
                                          const std::vector<std::vector<std::vector<double>>>& leaf_value,
                                          int base_rows, double base_tokens, const CostModel& cost, int prompt_rows) {
  double expected = base_tokens;
  int draft_rows = 0;
  for (size_t s = 0; s < k.size(); ++s) {
    draft_rows += k[s];
    for (int i = 0; i < k[s] && i < static_cast<int>(survival[s].size()); ++i) expected += survival[s][i];
  }
  struct Row {
    double value;
    int seq, leaf, index;
  };
  std::vector<Row> rows;
  std::vector<std::vector<int>> admitted(leaf_value.size());
  for (size_t s = 0; s < leaf_value.size(); ++s) {
    admitted[s].assign(leaf_value[s].size(), 0);
    for (size_t j = 0; j < leaf_value[s].size(); ++j)
      for (size_t t = 0; t < leaf_value[s][j].size(); ++t)
        rows.push_back({leaf_value[s][j][t], static_cast<int>(s), static_cast<int>(j), static_cast<int>(t)});
  }
  // Within a leaf values never rise and a stable sort keeps their order on ties, so every prefix
  // of this order admits a leaf's rows in order.
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.value > b.value; });
  double rate = expected / DecodeShareMs(cost, base_rows, prompt_rows, draft_rows);
  for (const Row& row : rows) {
    const double next = (expected + row.value) / DecodeShareMs(cost, base_rows, prompt_rows, draft_rows + 1);
    if (!(next > rate)) break;  // values only fall from here, and each row costs at least as much
    rate = next;
    expected += row.value;
    ++draft_rows;
    admitted[row.seq][row.leaf] = row.index + 1;
  }
  return admitted;
}

bool SurvivalStop::Keep(float confidence) const { return !(p_min > 0 && confidence < p_min); }

bool SurvivalStop::More(std::span<const float> confidences) const {
  if (calibration == nullptr || min_survival <= 0) return true;
  double survival = 1.0;
  for (float c : confidences) survival *= calibration->Acceptance(c);
  return !(survival * calibration->MeanAcceptance() < min_survival);
}

DraftPlanner::DraftPlanner(const ScheduleOptions& options, const CostModel* cost, int n_slots,
                           const DrafterNeeds* needs)
    : options_(options), cost_(cost), drafting_(needs != nullptr), sequences_(n_slots), stops_(n_slots), budget_(n_slots, 0) {
  if (needs != nullptr) options_.survival_stop = needs->asks_before_each_token;
  
}

DraftPlanner::~DraftPlanner() = default;

void DraftPlanner::Begin(int slot) {
  if (!learned_) learned_ = std::make_unique<DraftScheduler>(options_, cost_);
  sequences_[slot] = std::make_unique<DraftScheduler>(learned_->Seed());
  budget_[slot] = 0;
}

std::vector<DraftAsk> DraftPlanner::Ask(std::span<const PlanSequence> decoding, int prompt_rows) {
  std::vector<DraftAsk> asks(decoding.size());
  // Decoding rows and committed tokens the pass holds so far: every anchor, plus the drafts of the
  // sequences already decided (so that not every sequence decides as if it drafted alone). Prompt
  // rows share the pass but commit nothing now (SharedPass).
  int decode_rows = static_cast<int>(decoding.size());
  double decode_tokens = static_cast<double>(decoding.size());
  for (size_t i = 0; i < decoding.size(); ++i) {
    const PlanSequence& seq = decoding[i];
    budget_[seq.slot] = 0;
    if (!seq.drafting || seq.room <= 0) continue;
    DraftScheduler& s = *sequences_[seq.slot];
    const SharedPass shared{decode_rows - 1, decode_tokens - 1, prompt_rows};
    const int budget = std::min(s.Budget(seq.room, shared, seq.rows_behind), seq.remaining);
    if (budget <= 0) continue;
    // The rest of the pass counts on the length expected on average (a drafter that asks before
    // each token is asked for more, and usually stops sooner).
    const int planned = std::clamp(s.planned(), 1, budget);
    decode_rows += planned;
    for (double a : s.MeasuredSurvival(planned)) decode_tokens += a;
    SurvivalStop& stop = stops_[seq.slot];
    stop.p_min = options_.p_min;
    stop.min_survival = static_cast<float>(s.MinSurvival(shared));
    stop.calibration = &s.prob_calibration();
    budget_[seq.slot] = budget;
    asks[i] = {budget, &stop, s.probing() ? kProbeCatchUpRows : 0, options_.branches, options_.branch_tail};
  }
  return asks;
}

std::vector<int> DraftPlanner::Plan(std::span<const PlanSequence> decoding, std::span<Draft* const> drafts,
                                    int prompt_rows) {
  std::vector<int> k(decoding.size(), 0);
  std::vector<std::vector<double>> survival(decoding.size());
  for (size_t i = 0; i < decoding.size(); ++i) {
    Draft* d = drafts[i];
    if (d == nullptr) continue;
    const int slot = decoding[i].slot;
    if (static_cast<int>(d->tokens.size()) > budget_[slot]) d->tokens.resize(budget_[slot]);
    const DraftScheduler& s = *sequences_[slot];
    k[i] = s.Cut(*d);
    // Survival for batch admission: the drafter's own estimate, else measured acceptance. A
    // probe is verified whole.
    if (batch_scheduling() && !s.probing()) survival[i] = s.SurvivalOf(*d, k[i]);
  }
  if (batch_scheduling() && !decoding.empty()) {
    const int n = static_cast<int>(decoding.size());
    const std::vector<int> admitted = AdmitDraftSlots(survival, n, static_cast<double>(n), *cost_, prompt_rows);
    for (size_t i = 0; i < decoding.size(); ++i) {
      const DraftScheduler* s = sequences_[decoding[i].slot].get();
      if (s != nullptr && !s->probing()) k[i] = std::min(k[i], admitted[i]);
      if (k[i] < options_.n_min) k[i] = 0;
    }
  }
  PlanLeaves(decoding, drafts, k, survival, prompt_rows);
  return k;
}

void DraftPlanner::PlanLeaves(std::span<const PlanSequence> decoding, std::span<Draft* const> drafts,
                              const std::vector<int>& k, const std::vector<std::vector<double>>& survival,
                              int prompt_rows) {
  // Alternatives beside unverified tokens hang from rows the target does not run.
  bool any = false;
  for (size_t i = 0; i < decoding.size(); ++i) {
    Draft* d = drafts[i];
    if (d == nullptr) continue;
    if (static_cast<int>(d->branches.size()) > k[i]) d->branches.resize(k[i]);
    for (auto& alternatives : d->branches) {
      if (static_cast<int>(alternatives.size()) > options_.branches) alternatives.resize(options_.branches);
      for (DraftBranch& b : alternatives)
        if (static_cast<int>(b.tail.size()) > options_.branch_tail) b.tail.resize(options_.branch_tail);
      any = any || !alternatives.empty();
    }
  }
  if (!any || !batch_scheduling()) return;
  // Leaf j beside token p adds a token when the chain reaches p, token p is rejected and the
  // target takes the leaf: S(p - 1) (1 - a_p) b(prob), with a_p the chain's conditional acceptance
  // there and b the calibrated acceptance of an alternative where the chain failed. Tail token t
  // adds the leaf's value times the measured survival of a taken leaf's tail up to t.
  const int n = static_cast<int>(decoding.size());
  std::vector<std::vector<double>> chain(decoding.size());
  std::vector<std::vector<std::vector<double>>> value(decoding.size());
  for (size_t i = 0; i < decoding.size(); ++i) {
    Draft* d = drafts[i];
    if (d == nullptr) continue;
    const DraftScheduler& s = *sequences_[decoding[i].slot];
    chain[i] = survival[i].empty() ? s.SurvivalOf(*d, k[i]) : survival[i];  // a probe's is not computed
    for (int p = 0; p < static_cast<int>(d->branches.size()); ++p) {
      const double reach = p == 0 ? 1.0 : chain[i][p - 1];
      const double miss = reach - chain[i][p];
      for (const DraftBranch& b : d->branches[p]) {
        std::vector<double>& rows = value[i].emplace_back();
        rows.push_back(miss * s.branch_calibration().Acceptance(b.prob));
        const std::vector<double> tail = s.tail_acceptance().Survival(static_cast<int>(b.tail.size()));
        for (double t : tail) rows.push_back(rows.front() * t);
      }
    }
  }
  const std::vector<std::vector<int>> admitted =
      AdmitLeaves(chain, k, value, n, static_cast<double>(n), *cost_, prompt_rows);
  for (size_t i = 0; i < decoding.size(); ++i) {
    Draft* d = drafts[i];
    if (d == nullptr) continue;
    size_t j = 0;
    for (auto& alternatives : d->branches) {
      std::vector<DraftBranch> kept;
      for (DraftBranch& b : alternatives) {
        const int rows = admitted[i][j++];
        if (rows == 0) continue;
        b.tail.resize(rows - 1);
        kept.push_back(std::move(b));
      }
      alternatives.swap(kept);
    }
  }
}

void DraftPlanner::Observe(int slot, const Draft& draft, int verified, int accepted, double draft_ms, int behind_rows,
                           int leaf_rank, int tail_verified, int tail_accepted) {
  if (draft.tokens.empty()) return;
  sequences_[slot]->Observe(draft, verified, accepted, draft_ms, behind_rows);
  learned_->Observe(draft, verified, accepted, draft_ms, behind_rows);
  if (accepted < verified) {
    sequences_[slot]->ObserveBranches(draft, accepted, leaf_rank, tail_verified, tail_accepted);
    learned_->ObserveBranches(draft, accepted, leaf_rank, tail_verified, tail_accepted);
  }
}

std::vector<float> DraftPlanner::PredictedSurvival(int slot, const Draft& draft, int k) const {
  std::vector<float> predicted = draft.survival;
  if (predicted.empty() && !draft.probs.empty())
    for (double v : sequences_[slot]->SurvivalOf(draft, k)) predicted.push_back(static_cast<float>(v));
  return predicted;
}

bool DraftPlanner::DraftingPays(int n_sequences) const {
  if (!batch_scheduling()) return true;
  if (!learned_) return true;
  return learned_->Pays(SharedPass{n_sequences - 1, static_cast<double>(n_sequences) - 1, 0});
}

}  // namespace dspark
