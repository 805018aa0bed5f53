// The one interface every drafter implements. A drafter proposes tokens; it never verifies,
// samples from the target, counts statistics or times itself (the engine does all of that).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "sampling/sampling.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace dspark {

// What a drafter needs from the engine, read once at start-up.
struct DrafterNeeds {
  // Target layers whose input residual stream the drafter reads for every committed row.
  std::vector<int> target_tap_layers;
  int max_draft = 16;  // the longest block it can propose in one step
  // Draft.survival comes from a trained confidence head (worth scheduling on by default), not
  // from draft probabilities.
  bool confidence_head = false;
  // The drafter pays per drafted token and asks DraftParams::stop before each one (the draft
  // model): the planner then asks for up to the cap and lets each draft end where it stops paying.
  bool asks_before_each_token = false;
};

// How far a drafter drafts, decided by the planner (speculative/planner.h) and put to the drafter in terms
// every drafter can answer: each token's own confidence, the drafter's probability of the token or
// a confidence head's value. Drafters know nothing of costs, calibration or schedules.
class DraftStop {
 public:
  virtual ~DraftStop() = default;
  // Whether a token drafted with this confidence is kept; false: it is dropped and the draft ends.
  virtual bool Keep(float confidence) const = 0;
  // Whether to draft one more token after kept tokens with these confidences.
  virtual bool More(std::span<const float> confidences) const = 0;
};

// Constrained decoding as a drafter sees it: the grammar the target's output must follow, walked
// along one draft. Tokens the grammar forbids would only be cut from the draft before
// verification, so a drafter masks its own logits with it and drafts what can be accepted.
class DraftConstraint {
 public:
  virtual ~DraftConstraint() = default;
  // Masks the logits of the next draft token (n_vocab of them) to the tokens the grammar allows
  // after those drafted so far (the others become -inf). `greedy`: only the argmax will be read,
  // so an allowed argmax may be left as it is. False: no token is allowed; the draft ends.
  virtual bool Mask(float* logits, int n_vocab, bool greedy) = 0;
  // The token drafted after the last Mask.
  virtual void Push(int32_t token) = 0;
};

struct DraftParams {
  int budget = 8;                   // propose at most this many tokens
  SamplingParams sampling;          // the target's sampling; drafts are sampled from the same transforms
  const DraftStop* stop = nullptr;  // null: draft the whole budget
  // Rows of context a drafter behind it may read before drafting; 0 = all of them. A drafter with
  // its own cache (the draft model) that is further behind skips the older unseen rows: its
  // context keeps what it had, then a gap, then the last max_catch_up tokens at their true
  // positions. The planner sets it for probes, which must stay cheap on text where drafting does
  // not pay.
  int max_catch_up = 0;
  // The generated position of the first token to draft: keyed requests (sampling.keyed) draw the
  // token at position p with KeyedRng(seed, p), as the target's verification does (DrawDraftToken).
  int64_t position = 0;
  // Grammar-constrained requests: the constraint each drafted token must follow (null: none).
  DraftConstraint* constraint = nullptr;
  // Alternatives to propose per draft token (Draft::branches); 0: a chain.
  int branches = 0;
  // Tokens a drafter may propose after each alternative (DraftBranch::tail); 0: leaves only.
  int branch_tail = 0;
};

// Draws the draft token at generated position `position` from its distribution q: from the
// request's stream `rng`, or for a keyed request with the draw the target makes at that position,
// which couples the two (a draft distribution close to the target's then proposes the very token
// verification samples).
int32_t DrawDraftToken(const std::vector<float>& q, const SamplingParams& sampling, int64_t position, Rng& rng);

// An alternative to a draft token (token trees): another token the drafter finds likely at the
// same position, with the drafter's probability of it, and optionally the tokens the drafter
// proposes after it (a side chain of the tree: when the target takes the alternative, its tail is
// verified in the same pass, so a taken alternative need not end the step).
struct DraftBranch {
  int32_t token = 0;
  float prob = 0.0f;
  // Tokens proposed after the alternative, each deterministic (q one-hot on it), fixed when the
  // draft is: verifying them is exact under sampling as well.
  std::vector<int32_t> tail;
};

struct Draft {
  std::vector<int32_t> tokens;
  // Per token, the dense draft distribution q it was sampled from (after the same temperature /
  // top-k / top-p / min-p transforms as the target). Empty: the draft is deterministic (q is
  // one-hot on the token), as for n-gram lookup or greedy drafting.
  std::vector<std::vector<float>> q;
  // Per token, the drafter's own probability of it (softmax of its logits): its confidence where
  // it has no confidence head. Empty if the drafter has none.
  std::vector<float> probs;
  // Per slot, a calibrated estimate that the prefix up to and including this token survives
  // verification (a trained confidence head). Empty if the drafter has none; schedulers then
  // use the acceptance measured so far.
  std::vector<float> survival;
  // True when `survival` is not a prediction but the drafter's own record of how drafts like this
  // one fared, which it keeps up to date from the contexts it is given (LookupFirstDrafter's free
  // prompt lookups). The planner takes it as it is and learns nothing from the draft: the drafter
  // counts the outcome, and a free proposal says nothing of the cost or acceptance of its model.
  bool survival_measured = false;
  // Per draft token i, alternatives the drafter also finds likely at position i (after
  // tokens[0, i)), most likely first, none equal to tokens[i] (speculative/token_tree.h). The
  // target may verify them as leaves beside the chain in the same pass: when token i is rejected,
  // an alternative the target takes there commits one more token. Proposed only when
  // DraftParams::branches asks. Each is the next most likely token after those before it, fixed
  // once the chain is drafted, also under sampling, which keeps verification exact. An
  // alternative may carry a tail (DraftBranch::tail; DraftParams::branch_tail asks for it).
  std::vector<std::vector<DraftBranch>> branches;
  int forward_passes = 0;  // drafter model passes spent on this draft (statistics)
};

// A view of target hidden states for rows the target just committed: taps[t] points at
// [n_rows, n_embd] floats for target_tap_layers[t].
struct TapRows {
  int pos0 = 0;  // position of the first row
  int n_rows = 0;
  int n_embd = 0;
  std::vector<const float*> taps;
};

// One sequence's request in a batched proposal (Drafter::ProposeBatch).
struct ProposeRequest {
  int seq = 0;
  std::span<const int32_t> context;
  DraftParams params;
  Rng* rng = nullptr;
};

// A drafter's per-row state saved for the prompt cache (Drafter::SaveRows); opaque to the engine.
class DrafterRows {
 public:
  virtual ~DrafterRows() = default;
  virtual size_t bytes() const = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  // Stable lowercase id, the --spec-type name that makes it: "draft-simple", "draft-dspark",
  // "draft-dflash", "draft-eagle3", "ngram", "synthetic"; prompt lookup in front of a model: "ngram+draft-simple".
  virtual std::string_view Name() const = 0;
  virtual DrafterNeeds Needs() const { return {}; }

  // A new request starts on sequence slot `seq` (resets per-sequence state).
  virtual Status Begin(int seq) = 0;
  // A new request starts on `seq`, and its first `rows` context rows are those the request that
  // ran on slot `from` had (from == seq: the slot's previous request; another slot: the engine
  // copied that slot's cache; -1: the engine restored them from its host prompt cache). The target
  // does not run them again, so a drafter that learns from the target's taps sees none of them.
  // Returns how many of those rows the drafter's state holds from now on; the engine runs the rest
  // through the target again. The default suits drafters that read the context on every proposal
  // (and the draft model, which finds its common prefix itself): Begin, and all of them.
  // `saved`: with from == -1, what SaveRows returned for those rows when they went to the store
  // (null if it returned nothing).
  virtual Result<int> BeginWithPrefix(int seq, int from, int rows, const DrafterRows* saved) {
    DSPARK_TRY(Begin(seq));
    return rows;
  }
  // The state this drafter holds for the first `rows` context rows of `seq`, kept with the target's
  // rows when the engine moves them to its host prompt cache, and handed back to BeginWithPrefix
  // when a later request starts with them. Null: the drafter keeps nothing per row (or cannot).
  virtual std::unique_ptr<DrafterRows> SaveRows(int seq, int rows) { return nullptr; }
  // Target hidden states of rows committed for `seq` (only called when Needs() asks for taps).
  virtual Status ObserveTaps(int seq, const TapRows& rows) { return Status::Ok(); }
  // The prompt of `seq` is processed: `context` is the prompt and the first sampled token (which
  // the target has not processed yet). A drafter with state of its own ingests the prompt here, so
  // that the cost counts as prompt processing and the first Propose starts warm.
  virtual Status Prefill(int seq, std::span<const int32_t> context) { return Status::Ok(); }
  // Proposes up to params.budget tokens continuing `context`: every token of the sequence so far
  // (prompt and generated), whose last token the target has not processed yet. An empty draft
  // is a normal answer. Rollback is implicit: the next call's context says what survived.
  virtual Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) = 0;
  // Proposals for several sequences in one go (a continuous-batching step), results in request
  // order; a sequence's failure is its own. Each result equals what Propose would return. A
  // drafter that can share its forward pass across sequences (DSpark) overrides this; the
  // default proposes one sequence after the other.
  virtual std::vector<Result<Draft>> ProposeBatch(std::span<const ProposeRequest> requests) {
    std::vector<Result<Draft>> out;
    out.reserve(requests.size());
    for (const ProposeRequest& r : requests) out.push_back(Propose(r.seq, r.context, r.params, *r.rng));
    return out;
  }
  // The request on `seq` ended.
  virtual void End(int seq) {}

  // Keeps a thread pool the drafter runs on (--threads-draft) alive as long as the drafter: a base
  // member is destroyed after everything of the derived drafter that uses it.
  void AdoptPool(std::unique_ptr<ThreadPool> pool) { own_pool_ = std::move(pool); }

 private:
  std::unique_ptr<ThreadPool> own_pool_;
};

}  // namespace dspark
