// A drafter written against the public API: "repeat the last n-gram". Where the last n tokens
// occurred earlier in the context, it proposes the tokens that followed them there. The engine
// verifies every proposal against the target, so the output must be exactly plain greedy
// decoding's: the program exits 0 only if it is (and the drafter's tokens were used).
//   custom_drafter TARGET.gguf [PROMPT] [MAX_NEW_TOKENS]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <dspark/dspark.h>

namespace ds = dspark::api;

class RepeatNgramDrafter : public ds::Drafter {
 public:
  explicit RepeatNgramDrafter(int n_max) : n_max_(n_max) {}

  std::string Name() const override { return "repeat-ngram"; }

  ds::DraftProposal Propose(const ds::DraftRequest& request) override {
    ++calls_;
    const ds::TokenView ctx = request.context;
    const int len = static_cast<int>(ctx.size());
    ds::DraftProposal out;
    // Longest suffix first, most recent earlier occurrence first.
    for (int n = std::min(n_max_, len - 1); n >= 1; --n) {
      const int32_t* suffix = ctx.data() + len - n;
      for (int start = len - n - 1; start >= 0; --start) {
        if (!std::equal(suffix, suffix + n, ctx.data() + start)) continue;
        const int from = start + n;
        const int count = std::min(request.budget, len - from);
        if (count <= 0) continue;
        out.tokens.assign(ctx.begin() + from, ctx.begin() + from + count);
        // Optional confidences: a longer match is likelier to continue. They let the engine's
        // schedule (p_min, adaptive) end a draft early; without them it drafts the whole budget.
        const float confidence = n >= 3 ? 0.9f : n == 2 ? 0.7f : 0.4f;
        for (int i = 0; i < count; ++i) out.probs.push_back(confidence);
        out.draft_calls = 0;  // no model pass: prompt lookup is free
        return out;
      }
    }
    return out;  // no match: no draft this step (the target decodes one token)
  }

  int calls() const { return calls_; }

 private:
  int n_max_;
  int calls_ = 0;
};

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TARGET.gguf [PROMPT] [MAX_NEW_TOKENS]\n", argv[0]);
    return 2;
  }
  const std::string prompt =
      argc > 2 ? argv[2]
               : "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
                 "        self.items.append(item)\n\n    def pop(self):\n";
  try {
    ds::Model model = ds::Model::Load(argv[1]);
    ds::GenerateOptions go;
    go.max_new_tokens = argc > 3 ? std::atoi(argv[3]) : 96;

    ds::Engine plain(model);  // no drafter
    const ds::GenerateResult reference = plain.Generate(prompt, go);

    auto drafter = std::make_shared<RepeatNgramDrafter>(3);
    ds::EngineOptions eo;
    eo.custom_drafter = drafter;
    eo.schedule.n_max = 6;
    ds::Engine engine(model, eo);  // shares the loaded weights with `plain`
    const ds::GenerateResult spec = engine.Generate(prompt, go);

    const ds::Stats& s = spec.stats;
    std::printf("%s%s\n---\n", prompt.c_str(), spec.text.c_str());
    std::printf("drafter %s: %d proposals, %lld drafts verified, %lld tokens drafted, %lld accepted (%.3f), tau %.2f\n",
                engine.drafter_name().c_str(), drafter->calls(), static_cast<long long>(s.drafts),
                static_cast<long long>(s.drafted_tokens), static_cast<long long>(s.accepted_tokens),
                s.acceptance_rate, s.tau);
    std::printf("target calls: plain %lld, speculative %lld\n", static_cast<long long>(reference.stats.target_calls),
                static_cast<long long>(s.target_calls));
    if (!spec.drafter_error.empty()) {
      std::printf("FAIL: the drafter was dropped: %s\n", spec.drafter_error.c_str());
      return 1;
    }
    if (spec.ids != reference.ids) {
      std::printf("FAIL: speculative output differs from plain greedy decoding\n");
      return 1;
    }
    if (s.drafted_tokens == 0 || s.accepted_tokens == 0) {
      std::printf("FAIL: the drafter's tokens were never used\n");
      return 1;
    }
    std::printf("OK: speculative output == plain greedy output (%zu tokens)\n", spec.ids.size());
  } catch (const ds::Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", ds::ErrorCodeName(e.code()), e.what());
    return 1;
  }
  return 0;
}
