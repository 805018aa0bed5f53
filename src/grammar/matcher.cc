#include "grammar/matcher.h"

#include <algorithm>
#include <unordered_map>

namespace dspark::grammar {

// --- UTF-8 --------------------------------------------------------------------------------------

bool StepUtf8(GrammarState::Utf8* u, uint8_t byte, bool* complete) {
  *complete = false;
  if (u->remain == 0) {
    if (byte < 0x80) {
      u->cp = byte;
      u->len = 1;
      *complete = true;
      return true;
    }
    if (byte < 0xC2 || byte > 0xF4) return false;  // continuation, overlong lead, or past U+10FFFF
    u->len = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2;
    u->cp = byte & (0x7Fu >> u->len);
    u->remain = static_cast<uint8_t>(u->len - 1);
    return true;
  }
  if ((byte & 0xC0) != 0x80) return false;
  if (u->remain == u->len - 1) {  // second byte: the lead alone cannot rule these out
    if (u->len == 3 && u->cp == 0x0 && byte < 0xA0) return false;   // overlong
    if (u->len == 3 && u->cp == 0xD && byte >= 0xA0) return false;  // surrogate
    if (u->len == 4 && u->cp == 0x0 && byte < 0x90) return false;   // overlong
    if (u->len == 4 && u->cp == 0x4 && byte >= 0x90) return false;  // past U+10FFFF
  }
  u->cp = (u->cp << 6) | (byte & 0x3Fu);
  if (--u->remain == 0) *complete = true;
  return true;
}

void PartialRange(const GrammarState::Utf8& u, uint32_t* lo, uint32_t* hi) {
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  uint32_t shift = 6u * u.remain;
  *lo = std::max(u.cp << shift, kMin[u.len]);
  *hi = std::min((u.cp << shift) | ((1u << shift) - 1), 0x10FFFFu);
  if (u.len == 3 && u.remain == 2 && u.cp == 0xD) *hi = 0xD7FF;  // ED A0.. would be a surrogate
}

// --- Grammar ------------------------------------------------------------------------------------

Result<std::shared_ptr<const Grammar>> Grammar::Compile(std::string_view gbnf,
                                                        const GbnfLimits& parse_limits,
                                                        const MatchLimits& match_limits) {
  DSPARK_ASSIGN_OR_RETURN(ParsedGrammar parsed, ParseGbnf(gbnf, parse_limits));
  return FromParsed(parsed, match_limits);
}

std::shared_ptr<const Grammar> Grammar::FromParsed(const ParsedGrammar& parsed,
                                                   const MatchLimits& match_limits) {
  std::shared_ptr<Grammar> g(new Grammar());
  g->limits_ = match_limits;
  g->root_ = parsed.root_id;
  std::vector<uint32_t> start(parsed.rules.size());
  for (size_t r = 0; r < parsed.rules.size(); ++r) {
    start[r] = static_cast<uint32_t>(g->flat_.size());
    g->flat_.insert(g->flat_.end(), parsed.rules[r].begin(), parsed.rules[r].end());
  }
  for (size_t r = 0; r < parsed.rules.size(); ++r) {
    g->alt_begin_.push_back(static_cast<uint32_t>(g->alts_.size()));
    g->alts_.push_back(start[r]);
    for (size_t i = 0; i < parsed.rules[r].size(); ++i) {
      if (parsed.rules[r][i].type == ElementType::kAlt) {
        g->alts_.push_back(start[r] + static_cast<uint32_t>(i) + 1);
      }
    }
  }
  g->alt_begin_.push_back(static_cast<uint32_t>(g->alts_.size()));
  return g;
}

bool Grammar::IsCharElement(uint32_t pos) const {
  ElementType t = flat_[pos].type;
  return t == ElementType::kChar || t == ElementType::kCharNot || t == ElementType::kCharAny;
}

bool Grammar::IsRuleEnd(uint32_t pos) const {
  return flat_[pos].type == ElementType::kEnd || flat_[pos].type == ElementType::kAlt;
}

bool Grammar::MatchChar(uint32_t pos, uint32_t cp, uint32_t* end) const {
  if (flat_[pos].type == ElementType::kCharAny) {
    *end = pos + 1;
    return true;
  }
  bool positive = flat_[pos].type == ElementType::kChar;
  bool found = false;
  uint32_t p = pos;
  do {
    if (flat_[p + 1].type == ElementType::kCharRangeUpper) {
      found = found || (flat_[p].value <= cp && cp <= flat_[p + 1].value);
      p += 2;
    } else {
      found = found || flat_[p].value == cp;
      p += 1;
    }
  } while (flat_[p].type == ElementType::kCharAlt);
  *end = p;
  return found == positive;
}

bool Grammar::MatchRange(uint32_t pos, uint32_t lo, uint32_t hi) const {
  if (flat_[pos].type == ElementType::kCharAny) return true;
  bool positive = flat_[pos].type == ElementType::kChar;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint32_t p = pos;
  do {
    bool range = flat_[p + 1].type == ElementType::kCharRangeUpper;
    uint32_t a = flat_[p].value, b = range ? flat_[p + 1].value : a;
    if (positive) {
      if (a <= hi && b >= lo) return true;
    } else {
      ranges.emplace_back(a, b);
    }
    p += range ? 2 : 1;
  } while (flat_[p].type == ElementType::kCharAlt);
  if (positive) return false;
  // Negated: possible unless the excluded ranges together cover [lo, hi].
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered_to = lo;  // first code point not yet known to be excluded
  for (auto [a, b] : ranges) {
    if (a > covered_to) break;
    covered_to = std::max<uint64_t>(covered_to, uint64_t{b} + 1);
  }
  return covered_to <= hi;
}

// --- Stack forest -------------------------------------------------------------------------------

// The pushdown stacks of one matching job, hash-consed into a persistent tree (node = top element +
// parent node), so a stack set is a sorted list of node ids and equal sets get equal set ids.
// Expanding a node and stepping a set by a code point are memoised. Grammar::Start / Advance and
// TokenMasker run on this one engine, so the masker allows a token exactly when Accepts takes it.
//
// The limits are properties of a node or a set, never of the order in which the work was done (a
// masker walk shares memo entries across thousands of tokens, Advance starts afresh), so every
// caller reaches the same verdict. A node's cost is the size of its expansion tree counted as if
// nothing were shared: an ambiguous recursive grammar ("root ::= [a-z] root*") shows its growth there
// even when the distinct stacks stay few, and a grammar whose expansion branches at every level
// cannot make the forest exponential, because building a node stops once its cost passes what its
// caller can still spend.
class Grammar::Forest {
 public:
  explicit Forest(const Grammar& g) : g_(g), over_(g.limits_.max_expansion + 1) {
    expanded_.push_back({{-1}, 1});  // kEmptyExpansion: the empty stack expands to itself
    expanded_.push_back({{}, over_});  // kPastBudget: a node whose cost reaches the caller's budget
  }

  // The set of explicit stacks (each bottom first, top a character element).
  int32_t FromStacks(const std::vector<std::vector<uint32_t>>& stacks) {
    std::vector<int32_t> set;
    for (const auto& stack : stacks) {
      int32_t id = -1;
      for (uint32_t pos : stack) id = Intern(pos, id);
      set.push_back(id);
    }
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    return InternSet(set);
  }

  // The set that starts the root rule, or -1 when a limit refuses it.
  int32_t StartSet() {
    std::vector<int32_t> out;
    size_t cost = 0;
    for (uint32_t i = g_.alt_begin_[g_.root_]; i < g_.alt_begin_[g_.root_ + 1]; ++i) {
      uint32_t a = g_.alts_[i];
      if (!Gather(g_.IsRuleEnd(a) ? -1 : Intern(a, -1), &out, &cost)) return -1;
    }
    return Finish(&out, cost);
  }

  // The set after code point cp, or -1 when nothing accepts it (or a limit refuses it).
  int32_t Step(int32_t set_id, uint32_t cp) {
    const size_t slot = static_cast<size_t>(set_id) * 128 + cp;  // into ascii_next_ when cp < 128
    if (cp < 128) {
      if (ascii_next_[slot] != kUnknown) return ascii_next_[slot];
    } else {
      auto it = other_next_.find(Key(set_id, cp));
      if (it != other_next_.end()) return it->second;
    }
    std::vector<int32_t> out;
    size_t cost = 0;
    int32_t next = -1;
    bool ok = true;
    for (size_t i = 0; i < sets_[set_id].size() && ok; ++i) {
      int32_t id = sets_[set_id][i];
      uint32_t end;
      if (id < 0 || !g_.MatchChar(nodes_[id].pos, cp, &end)) continue;
      int32_t parent = nodes_[id].parent;
      ok = Gather(g_.IsRuleEnd(end) ? parent : Intern(end, parent), &out, &cost);
    }
    if (ok) next = Finish(&out, cost);
    if (cp < 128) {
      ascii_next_[slot] = next;  // by index: InternSet may have resized the table meanwhile
    } else {
      other_next_[Key(set_id, cp)] = next;
    }
    return next;
  }

  // Whether some stack of the set can take a code point the partial decoder u can still complete to.
  bool PartialOk(int32_t set_id, const GrammarState::Utf8& u) {
    uint64_t key = Key(set_id, (u.cp << 5) | (uint32_t{u.len} << 2) | u.remain);
    auto [it, inserted] = partial_ok_.try_emplace(key, false);
    if (!inserted) return it->second;
    uint32_t lo, hi;
    PartialRange(u, &lo, &hi);
    for (int32_t id : sets_[set_id]) {
      if (id >= 0 && g_.MatchRange(nodes_[id].pos, lo, hi)) return it->second = true;
    }
    return false;
  }

  // Only the empty stack is left: the grammar is complete and nothing more can follow.
  bool OnlyFinished(int32_t set_id) const { return sets_[set_id].size() == 1 && sets_[set_id][0] < 0; }

  // The set as explicit stacks, bottom first, in node-id order: the empty stack (-1), if any, first.
  std::vector<std::vector<uint32_t>> Stacks(int32_t set_id) const {
    std::vector<std::vector<uint32_t>> stacks;
    for (int32_t id : sets_[set_id]) {
      std::vector<uint32_t> stack;
      for (int32_t n = id; n >= 0; n = nodes_[n].parent) stack.push_back(nodes_[n].pos);
      std::reverse(stack.begin(), stack.end());
      stacks.push_back(std::move(stack));
    }
    return stacks;
  }

 private:
  struct Node {
    uint32_t pos;
    int32_t parent;  // -1 = bottom
    uint32_t depth;
  };
  // Character-topped stacks (or -1, the empty stack) reachable from one node, sorted and unique,
  // and the node's cost; cost == over_ means a limit refuses it (tops is then empty).
  struct Expansion {
    std::vector<int32_t> tops;
    size_t cost;
  };

  static uint64_t Key(int32_t set_id, uint32_t low) {
    return (uint64_t{static_cast<uint32_t>(set_id)} << 32) | low;
  }

  int32_t Intern(uint32_t pos, int32_t parent) {
    uint64_t key = (uint64_t{pos} << 32) | static_cast<uint32_t>(parent + 1);
    auto [it, inserted] = node_ids_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
    if (inserted) {
      nodes_.push_back({pos, parent, parent < 0 ? 1u : nodes_[parent].depth + 1});
      expand_.push_back(-1);
      past_budget_.push_back(0);
    }
    return it->second;
  }

  uint32_t Depth(int32_t id) const { return id < 0 ? 0 : nodes_[id].depth; }

  // Index into expanded_ of node id's expansion (kEmptyExpansion for the empty stack), or
  // kPastBudget when its cost is at least `budget`. Exploring stops there: a node is never built
  // beyond what its caller can still afford, so a run of thousands of nullable items ("root ::= [a]
  // x?{9000}") costs the budget, not its length. A node's cost is exact whenever it is below the
  // budget it was asked with, so every verdict is the one an unbounded search would reach.
  size_t Expand(int32_t id, size_t budget) {
    if (id < 0) return kEmptyExpansion;
    if (expand_[id] >= 0) return static_cast<size_t>(expand_[id]);
    if (budget <= past_budget_[id]) return kPastBudget;  // known to cost at least that
    Expansion e{{}, 1};
    uint32_t pos = nodes_[id].pos;
    if (g_.IsCharElement(pos)) {
      e.tops.push_back(id);
    } else {
      uint32_t rule = g_.flat_[pos].value;
      int32_t parent = nodes_[id].parent;
      int32_t cont = g_.IsRuleEnd(pos + 1) ? parent : Intern(pos + 1, parent);
      int merged = 0;  // alternatives that contributed stacks: one alone is already sorted and unique
      for (uint32_t i = g_.alt_begin_[rule]; i < g_.alt_begin_[rule + 1]; ++i) {
        uint32_t a = g_.alts_[i];
        int32_t child;
        if (g_.IsRuleEnd(a)) {
          child = cont;
        } else if (Depth(cont) + 1 <= g_.limits_.max_stack_depth) {
          child = Intern(a, cont);
        } else {
          continue;  // nesting past max_stack_depth: this way is dropped
        }
        const Expansion& sub = expanded_[Expand(child, budget - e.cost)];
        e.cost = std::min(over_, e.cost + sub.cost);
        if (e.cost >= budget) return PastBudget(id, budget);
        if (sub.tops.empty()) continue;
        // Each expansion is sorted: merging keeps the union sorted in linear time.
        const auto mid = static_cast<std::ptrdiff_t>(e.tops.size());
        e.tops.insert(e.tops.end(), sub.tops.begin(), sub.tops.end());
        std::inplace_merge(e.tops.begin(), e.tops.begin() + mid, e.tops.end());
        ++merged;
      }
      if (merged > 1) e.tops.erase(std::unique(e.tops.begin(), e.tops.end()), e.tops.end());
      // The node copied its tops, a few nanoseconds each where building a node costs about a
      // hundred: counted at a sixteenth, so a run of n nullable items ("root ::= [a] root*{800}"),
      // whose nodes copy n^2/2 stacks, stays within the budget too.
      e.cost = std::min(over_, e.cost + e.tops.size() / kTopsPerUnit);
      // More distinct stacks than a set may hold: every set containing this node is refused too.
      if (e.tops.size() > g_.limits_.max_stacks) e.cost = over_;
      if (e.cost >= over_) e.tops.clear();
    }
    expand_[id] = static_cast<int32_t>(expanded_.size());
    expanded_.push_back(std::move(e));
    return expanded_.size() - 1;
  }

  // Node id costs at least `budget`: remembered as such, or as refused outright when that is the
  // whole budget (a property of the node, like an exact cost).
  size_t PastBudget(int32_t id, size_t budget) {
    if (budget < over_) {
      past_budget_[id] = std::max(past_budget_[id], budget);
      return kPastBudget;
    }
    expand_[id] = static_cast<int32_t>(expanded_.size());
    expanded_.push_back({{}, over_});
    return expanded_.size() - 1;
  }

  // Adds node id's expansion to *out and its cost to *cost; false once the budget is spent.
  bool Gather(int32_t id, std::vector<int32_t>* out, size_t* cost) {
    if (*cost >= over_) return false;
    const Expansion& e = expanded_[Expand(id, over_ - *cost)];
    *cost += e.cost;
    if (*cost >= over_) return false;
    out->insert(out->end(), e.tops.begin(), e.tops.end());
    return true;
  }

  // The set of *out, or -1 when a limit refuses it. Each stack of the set also costs its depth,
  // what a caller pays to hold it as an explicit stack (GrammarState).
  int32_t Finish(std::vector<int32_t>* out, size_t cost) {
    std::sort(out->begin(), out->end());
    out->erase(std::unique(out->begin(), out->end()), out->end());
    if (out->empty() || out->size() > g_.limits_.max_stacks) return -1;
    for (int32_t id : *out) cost += Depth(id) + 1;
    return cost >= over_ ? -1 : InternSet(*out);
  }

  int32_t InternSet(const std::vector<int32_t>& set) {
    std::string key(reinterpret_cast<const char*>(set.data()), set.size() * sizeof(int32_t));
    auto [it, inserted] = set_ids_.try_emplace(std::move(key), static_cast<int32_t>(sets_.size()));
    if (inserted) {
      sets_.push_back(set);
      ascii_next_.resize(sets_.size() * 128, kUnknown);
    }
    return it->second;
  }

  static constexpr int32_t kUnknown = -2;
  static constexpr size_t kEmptyExpansion = 0;
  static constexpr size_t kPastBudget = 1;
  static constexpr size_t kTopsPerUnit = 16;

  const Grammar& g_;
  const size_t over_;  // the smallest cost a limit refuses
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<int32_t> expand_;  // node id -> index into expanded_, or -1
  std::vector<size_t> past_budget_;  // node id -> a budget its cost is known to reach (0: none)
  std::vector<Expansion> expanded_;
  std::vector<std::vector<int32_t>> sets_;
  std::unordered_map<std::string, int32_t> set_ids_;
  std::vector<int32_t> ascii_next_;  // [set * 128 + cp]
  std::unordered_map<uint64_t, int32_t> other_next_;
  std::unordered_map<uint64_t, bool> partial_ok_;  // (set, partial decoder) -> can complete
};

GrammarState Grammar::Start() const {
  GrammarState state;
  Forest forest(*this);
  int32_t set = forest.StartSet();
  if (set >= 0) state.stacks_ = forest.Stacks(set);
  return state;
}

bool Grammar::Accepts(const GrammarState& state, std::string_view bytes) const {
  GrammarState copy = state;
  return Advance(&copy, bytes);
}

bool Grammar::Advance(GrammarState* state, std::string_view bytes) const {
  if (bytes.empty() || state->dead()) return false;
  Forest forest(*this);
  int32_t set = forest.FromStacks(state->stacks_);
  GrammarState::Utf8 u = state->utf8_;
  for (char c : bytes) {
    bool complete;
    if (!StepUtf8(&u, static_cast<uint8_t>(c), &complete)) return false;
    if (complete && (set = forest.Step(set, u.cp)) < 0) return false;
  }
  if (u.remain != 0 && !forest.PartialOk(set, u)) return false;
  state->stacks_ = forest.Stacks(set);
  state->utf8_ = u;
  return true;
}

bool Grammar::CanEnd(const GrammarState& state) const {
  return state.utf8_.remain == 0 && !state.stacks_.empty() && state.stacks_.front().empty();
}

// --- TokenMasker --------------------------------------------------------------------------------

TokenMasker::TokenMasker(const std::vector<std::string>& token_bytes)
    : vocab_size_(token_bytes.size()) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < token_bytes.size(); ++i) {
    if (!token_bytes[i].empty()) ids.push_back(i);
  }
  std::sort(ids.begin(), ids.end(),
            [&](uint32_t a, uint32_t b) { return token_bytes[a] < token_bytes[b]; });
  Build(ids, 0, ids.size(), 0, token_bytes);
}

uint32_t TokenMasker::Build(std::vector<uint32_t>& ids, size_t lo, size_t hi, size_t depth,
                            const std::vector<std::string>& token_bytes) {
  uint32_t index = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({});
  Node node;
  node.token_begin = static_cast<uint32_t>(token_ids_.size());
  while (lo < hi && token_bytes[ids[lo]].size() == depth) token_ids_.push_back(ids[lo++]);
  node.token_end = static_cast<uint32_t>(token_ids_.size());
  // Children: runs of equal byte at `depth` (the ids are sorted by their bytes).
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = lo; i < hi;) {
    size_t j = i;
    while (j < hi && token_bytes[ids[j]][depth] == token_bytes[ids[i]][depth]) ++j;
    runs.emplace_back(i, j);
    i = j;
  }
  node.edge_begin = static_cast<uint32_t>(edges_.size());
  node.edge_end = node.edge_begin + static_cast<uint32_t>(runs.size());
  edges_.resize(node.edge_end);
  nodes_[index] = node;
  for (size_t k = 0; k < runs.size(); ++k) {
    uint8_t byte = static_cast<uint8_t>(token_bytes[ids[runs[k].first]][depth]);
    uint32_t child = Build(ids, runs[k].first, runs[k].second, depth + 1, token_bytes);
    edges_[node.edge_begin + k] = {byte, child};
  }
  return index;
}

// One AllowedTokens call: walking the trie costs about one memoised Forest::Step per trie node,
// because most trie nodes revisit a handful of stack sets.
class TokenMasker::Walk {
 public:
  Walk(const TokenMasker& m, const Grammar& g, uint8_t* allowed) : m_(m), forest_(g), allowed_(allowed) {}

  void Run(const GrammarState& state) {
    if (state.dead()) return;
    Visit(0, forest_.FromStacks(state.stacks_), state.utf8_);
  }

 private:
  void Visit(uint32_t node_index, int32_t set_id, GrammarState::Utf8 u) {
    const Node& node = m_.nodes_[node_index];
    for (uint32_t e = node.edge_begin; e < node.edge_end; ++e) {
      const Edge& edge = m_.edges_[e];
      GrammarState::Utf8 v = u;
      bool complete;
      if (!StepUtf8(&v, edge.byte, &complete)) continue;
      int32_t next = set_id;
      if (complete) {
        next = forest_.Step(set_id, v.cp);
        if (next < 0) continue;
      } else if (!forest_.PartialOk(set_id, v)) {
        continue;
      }
      const Node& child = m_.nodes_[edge.child];
      for (uint32_t t = child.token_begin; t < child.token_end; ++t) allowed_[m_.token_ids_[t]] = 1;
      if (child.edge_begin != child.edge_end && !(forest_.OnlyFinished(next) && v.remain == 0)) {
        Visit(edge.child, next, v);
      }
    }
  }

  const TokenMasker& m_;
  Grammar::Forest forest_;
  uint8_t* allowed_;
};

void TokenMasker::AllowedTokens(const Grammar& grammar, const GrammarState& state,
                                std::vector<uint8_t>* allowed) const {
  allowed->assign(vocab_size_, 0);
  Walk(*this, grammar, allowed->data()).Run(state);
}

}  // namespace dspark::grammar
