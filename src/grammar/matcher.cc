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

bool Grammar::Expand(std::vector<uint32_t>* stack, std::vector<std::vector<uint32_t>>* out, size_t* budget) const {
  // Raw (pre-dedup) output bounds: only pathological grammars get near them.
  if (out->size() > limits_.max_stacks * 64) return false;
  if (stack->empty() || IsCharElement(stack->back())) {
    const size_t cost = stack->size() + 1;
    if (cost > *budget) return false;
    *budget -= cost;
    out->push_back(*stack);
    return true;
  }
  uint32_t pos = stack->back();
  uint32_t rule = flat_[pos].value;
  stack->pop_back();
  bool has_cont = !IsRuleEnd(pos + 1);
  if (has_cont) stack->push_back(pos + 1);
  bool ok = true;
  for (uint32_t i = alt_begin_[rule]; i < alt_begin_[rule + 1] && ok; ++i) {
    uint32_t a = alts_[i];
    if (IsRuleEnd(a)) {
      ok = Expand(stack, out, budget);
    } else if (stack->size() + 1 <= limits_.max_stack_depth) {
      stack->push_back(a);
      ok = Expand(stack, out, budget);
      stack->pop_back();
    }
  }
  if (has_cont) stack->pop_back();
  stack->push_back(pos);
  return ok;
}

static bool Normalize(std::vector<std::vector<uint32_t>>* stacks, size_t max_stacks) {
  std::sort(stacks->begin(), stacks->end());
  stacks->erase(std::unique(stacks->begin(), stacks->end()), stacks->end());
  return !stacks->empty() && stacks->size() <= max_stacks;
}

bool Grammar::AcceptCodePoint(std::vector<std::vector<uint32_t>>* stacks, uint32_t cp) const {
  std::vector<std::vector<uint32_t>> next;
  std::vector<uint32_t> s;
  size_t budget = limits_.max_expansion;
  for (const auto& stack : *stacks) {
    uint32_t end;
    if (stack.empty() || !MatchChar(stack.back(), cp, &end)) continue;
    s.assign(stack.begin(), stack.end() - 1);
    if (!IsRuleEnd(end)) s.push_back(end);
    if (!Expand(&s, &next, &budget)) return false;
  }
  if (!Normalize(&next, limits_.max_stacks)) return false;
  *stacks = std::move(next);
  return true;
}

bool Grammar::PartialPossible(const std::vector<std::vector<uint32_t>>& stacks,
                              const GrammarState::Utf8& utf8) const {
  uint32_t lo, hi;
  PartialRange(utf8, &lo, &hi);
  for (const auto& stack : stacks) {
    if (!stack.empty() && MatchRange(stack.back(), lo, hi)) return true;
  }
  return false;
}

GrammarState Grammar::Start() const {
  GrammarState state;
  std::vector<uint32_t> s;
  size_t budget = limits_.max_expansion;
  for (uint32_t i = alt_begin_[root_]; i < alt_begin_[root_ + 1]; ++i) {
    s.clear();
    if (!IsRuleEnd(alts_[i])) s.push_back(alts_[i]);
    if (!Expand(&s, &state.stacks_, &budget)) {
      state.stacks_.clear();
      return state;
    }
  }
  if (!Normalize(&state.stacks_, limits_.max_stacks)) state.stacks_.clear();
  return state;
}

bool Grammar::Accepts(const GrammarState& state, std::string_view bytes) const {
  GrammarState copy = state;
  return Advance(&copy, bytes);
}

bool Grammar::Advance(GrammarState* state, std::string_view bytes) const {
  if (bytes.empty() || state->dead()) return false;
  std::vector<std::vector<uint32_t>> stacks = state->stacks_;
  GrammarState::Utf8 u = state->utf8_;
  for (char c : bytes) {
    bool complete;
    if (!StepUtf8(&u, static_cast<uint8_t>(c), &complete)) return false;
    if (complete && !AcceptCodePoint(&stacks, u.cp)) return false;
  }
  if (u.remain != 0 && !PartialPossible(stacks, u)) return false;
  state->stacks_ = std::move(stacks);
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

// One AllowedTokens call. Stacks are hash-consed into a persistent tree (node = top element +
// parent node), so a stack set is a sorted list of node ids and equal sets get equal set ids.
// Stepping a set by a code point is memoised per (set, code point); walking the trie then costs
// about one table lookup per trie node, because most trie nodes revisit a handful of sets.
class TokenMasker::Walk {
 public:
  Walk(const TokenMasker& m, const Grammar& g, uint8_t* allowed)
      : m_(m), g_(g), allowed_(allowed) {}

  void Run(const GrammarState& state) {
    if (state.dead()) return;
    std::vector<int32_t> set;
    for (const auto& stack : state.stacks_) {
      int32_t id = -1;
      for (uint32_t pos : stack) id = Intern(pos, id);
      set.push_back(id);
    }
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    Visit(0, InternSet(set), state.utf8_);
  }

 private:
  struct StackNode {
    uint32_t pos;
    int32_t parent;  // -1 = bottom
    uint32_t depth;
  };

  int32_t Intern(uint32_t pos, int32_t parent) {
    uint64_t key = (uint64_t{pos} << 32) | static_cast<uint32_t>(parent + 1);
    auto [it, inserted] = node_ids_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
    if (inserted) {
      nodes_.push_back({pos, parent, parent < 0 ? 1u : nodes_[parent].depth + 1});
      expand_.push_back(-1);
    }
    return it->second;
  }

  uint32_t Depth(int32_t id) const { return id < 0 ? 0 : nodes_[id].depth; }

  // Character-topped stacks (or -1, the empty stack) reachable from stack `id`; sorted, unique.
  const std::vector<int32_t>& Expand(int32_t id) {
    if (id < 0) return kEmptyStack;
    if (expand_[id] >= 0) return expanded_[expand_[id]];
    std::vector<int32_t> out;
    uint32_t pos = nodes_[id].pos;
    if (g_.IsCharElement(pos)) {
      out.push_back(id);
    } else {
      uint32_t rule = g_.flat_[pos].value;
      int32_t parent = nodes_[id].parent;
      int32_t cont = g_.IsRuleEnd(pos + 1) ? parent : Intern(pos + 1, parent);
      for (uint32_t i = g_.alt_begin_[rule]; i < g_.alt_begin_[rule + 1]; ++i) {
        uint32_t a = g_.alts_[i];
        if (g_.IsRuleEnd(a)) {
          const auto& sub = Expand(cont);
          out.insert(out.end(), sub.begin(), sub.end());
        } else if (Depth(cont) + 1 <= g_.limits_.max_stack_depth) {
          const auto& sub = Expand(Intern(a, cont));
          out.insert(out.end(), sub.begin(), sub.end());
        }
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
    }
    expand_[id] = static_cast<int32_t>(expanded_.size());
    expanded_.push_back(std::move(out));
    return expanded_[expand_[id]];
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

  // The set after code point cp, or -1 when nothing accepts it.
  int32_t Step(int32_t set_id, uint32_t cp) {
    int32_t* memo = nullptr;
    if (cp < 128) {
      memo = &ascii_next_[static_cast<size_t>(set_id) * 128 + cp];
      if (*memo != kUnknown) return *memo;
    } else {
      auto it = other_next_.find((uint64_t{static_cast<uint32_t>(set_id)} << 32) | cp);
      if (it != other_next_.end()) return it->second;
    }
    std::vector<int32_t> out;
    for (size_t i = 0; i < sets_[set_id].size(); ++i) {
      int32_t id = sets_[set_id][i];
      uint32_t end;
      if (id < 0 || !g_.MatchChar(nodes_[id].pos, cp, &end)) continue;
      int32_t parent = nodes_[id].parent;
      int32_t succ = g_.IsRuleEnd(end) ? parent : Intern(end, parent);
      const auto& sub = Expand(succ);
      out.insert(out.end(), sub.begin(), sub.end());
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    int32_t next = (out.empty() || out.size() > g_.limits_.max_stacks) ? -1 : InternSet(out);
    if (cp < 128) {
      ascii_next_[static_cast<size_t>(set_id) * 128 + cp] = next;  // InternSet may have resized
    } else {
      other_next_[(uint64_t{static_cast<uint32_t>(set_id)} << 32) | cp] = next;
    }
    return next;
  }

  bool PartialOk(int32_t set_id, const GrammarState::Utf8& u) {
    uint64_t key = (uint64_t{static_cast<uint32_t>(set_id)} << 32) | (u.cp << 5) |
                   (uint32_t{u.len} << 2) | u.remain;
    auto [it, inserted] = partial_ok_.try_emplace(key, false);
    if (!inserted) return it->second;
    uint32_t lo, hi;
    PartialRange(u, &lo, &hi);
    for (int32_t id : sets_[set_id]) {
      if (id >= 0 && g_.MatchRange(nodes_[id].pos, lo, hi)) return it->second = true;
    }
    return false;
  }

  void Visit(uint32_t node_index, int32_t set_id, GrammarState::Utf8 u) {
    const Node& node = m_.nodes_[node_index];
    for (uint32_t e = node.edge_begin; e < node.edge_end; ++e) {
      const Edge& edge = m_.edges_[e];
      GrammarState::Utf8 v = u;
      bool complete;
      if (!StepUtf8(&v, edge.byte, &complete)) continue;
      int32_t next = set_id;
      if (complete) {
        next = Step(set_id, v.cp);
        if (next < 0) continue;
      } else if (!PartialOk(set_id, v)) {
        continue;
      }
      const Node& child = m_.nodes_[edge.child];
      for (uint32_t t = child.token_begin; t < child.token_end; ++t) allowed_[m_.token_ids_[t]] = 1;
      bool only_finished = sets_[next].size() == 1 && sets_[next][0] < 0;
      if (child.edge_begin != child.edge_end && !(only_finished && v.remain == 0)) {
        Visit(edge.child, next, v);
      }
    }
  }

  static constexpr int32_t kUnknown = -2;
  static inline const std::vector<int32_t> kEmptyStack = {-1};

  const TokenMasker& m_;
  const Grammar& g_;
  uint8_t* allowed_;
  std::vector<StackNode> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<int32_t> expand_;  // node id -> index into expanded_, or -1
  std::vector<std::vector<int32_t>> expanded_;
  std::vector<std::vector<int32_t>> sets_;
  std::unordered_map<std::string, int32_t> set_ids_;
  std::vector<int32_t> ascii_next_;  // [set * 128 + cp]
  std::unordered_map<uint64_t, int32_t> other_next_;
  std::unordered_map<uint64_t, bool> partial_ok_;  // (set, partial decoder) -> can complete
};

void TokenMasker::AllowedTokens(const Grammar& grammar, const GrammarState& state,
                                std::vector<uint8_t>* allowed) const {
  allowed->assign(vocab_size_, 0);
  Walk(*this, grammar, allowed->data()).Run(state);
}

}  // namespace dspark::grammar
