#include "serve/tool_calls.h"

#include <fmt/format.h>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"

#include <algorithm>
#include <utility>

namespace dspark::serve {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kLlamaIpythonHeader = "<|start_header_id|>ipython<|end_header_id|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kMistralArgs = "[ARGS]";
// DeepSeek's markers are spelled with U+FF5C (fullwidth vertical line) and U+2581 (lower one
// eighth block), not '|' and '_'.
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";

// How the text at a position relates to a marker: it starts with it, it is cut short inside
// it (more text may complete it), or neither.
enum class Match { kNo, kPartial, kFull };

Match MatchAt(std::string_view buf, size_t pos, std::string_view marker) {
  const std::string_view rest = buf.substr(pos);
  if (rest.size() >= marker.size()) return rest.starts_with(marker) ? Match::kFull : Match::kNo;
  return marker.starts_with(rest) ? Match::kPartial : Match::kNo;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

bool IsNameChar(char c) { return IsAlnum(c) || c == '_' || c == '-'; }

size_t SkipSpace(std::string_view s, size_t pos) {
  while (pos < s.size() && IsSpace(s[pos])) ++pos;
  return pos;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The end of `s` moved back to the start of a UTF-8 sequence that `s` cuts short, so that no
// content event carries half a character (the JSON writer would reject it).
size_t Utf8SafeEnd(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return back < len ? n - back : n;
  }
  return n;
}

// The end of the JSON object or array that starts at s[pos] ('{' or '['), found by bracket
// depth outside strings. kInvalid when a closer does not match its opener (end is just past it).
// The text is not validated; the caller parses it.
struct JsonScan {
  enum class Status { kIncomplete, kComplete, kInvalid };
  Status status;
  size_t end;
};

JsonScan ScanJson(std::string_view s, size_t pos) {
  std::string closers;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      closers.push_back('}');
    } else if (c == '[') {
      closers.push_back(']');
    } else if (c == '}' || c == ']') {
      if (closers.empty() || closers.back() != c) return {JsonScan::Status::kInvalid, i + 1};
      closers.pop_back();
      if (closers.empty()) return {JsonScan::Status::kComplete, i + 1};
    }
  }
  return {JsonScan::Status::kIncomplete, s.size()};
}

bool Contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Arguments as compact JSON text: an object, or a string holding one (some fine-tunes quote
// them); absent or null is a call without arguments.
std::optional<std::string> ArgumentsText(const ojson* args) {
  if (args == nullptr || args->is_null()) return "{}";
  if (args->is_string()) {
    const ojson inner = ojson::parse(args->get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
    if (inner.is_discarded() || !inner.is_object()) return std::nullopt;
    return inner.dump();
  }
  if (!args->is_object()) return std::nullopt;
  return args->dump();
}

std::optional<ToolCall> CallFromParts(std::string_view name, const ojson* args, const std::vector<std::string>& names) {
  if (!Contains(names, name)) return std::nullopt;
  std::optional<std::string> text = ArgumentsText(args);
  if (!text) return std::nullopt;
  return ToolCall{.id = "", .name = std::string(name), .arguments = std::move(*text)};
}

// {"name": f, "arguments" or "parameters": {...}}; other keys ("type", "id") are ignored.
std::optional<ToolCall> CallFromObject(const ojson& obj, const std::vector<std::string>& names) {
  if (!obj.is_object()) return std::nullopt;
  const auto name = obj.find("name");
  if (name == obj.end() || !name->is_string()) return std::nullopt;
  auto args = obj.find("arguments");
  if (args == obj.end()) args = obj.find("parameters");
  return CallFromParts(name->get_ref<const std::string&>(), args == obj.end() ? nullptr : &*args, names);
}

std::optional<ToolCall> CallFromJsonText(std::string_view text, const std::vector<std::string>& names) {
  const ojson obj = ojson::parse(Trim(text), nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return std::nullopt;
  return CallFromObject(obj, names);
}

// What a call block turned out to be. `end` is its length in the text, which starts at the
// block's start marker.
struct Block {
  enum class Status { kIncomplete, kCalls, kText };
  Status status = Status::kIncomplete;
  size_t end = 0;
  std::vector<ToolCall> calls;  // kCalls; ids are empty unless the model wrote one

  static Block Incomplete() { return {}; }
  static Block Text(size_t end) { return {Status::kText, end, {}}; }
  static Block Calls(size_t end, std::vector<ToolCall> calls) { return {Status::kCalls, end, std::move(calls)}; }
};

// Every block parser: `s` starts with the format's start marker; `at_end` says no more text
// will come, and then the result is never kIncomplete. A result other than kIncomplete must not
// change when more text is appended, so that streaming and whole-text parsing agree.

Block ParseHermes(std::string_view s, bool at_end, const std::vector<std::string>& names) {
  const size_t body = kHermesOpen.size();
  const size_t close = s.find(kHermesClose, body);
  std::string_view json;
  size_t end = 0;
  if (close != std::string_view::npos) {
    json = s.substr(body, close - body);
    end = close + kHermesClose.size();
  } else if (at_end) {
    json = s.substr(body);
    end = s.size();
  } else {
    return Block::Incomplete();
  }
  std::optional<ToolCall> call = CallFromJsonText(json, names);
  if (!call) return Block::Text(end);
  return Block::Calls(end, {std::move(*call)});
}

// Llama 3 has no start marker of its own besides <|python_tag|>: a call is a JSON object whose
// first key is "name" (or "type", as in {"type": "function", "name": ...}).
Match Llama3Start(std::string_view s, size_t pos) {
  const Match tag = MatchAt(s, pos, kPythonTag);
  if (tag != Match::kNo) return tag;
  if (s[pos] != '{') return Match::kNo;
  const size_t key = SkipSpace(s, pos + 1);
  if (key == s.size()) return Match::kPartial;
  const Match name = MatchAt(s, key, "\"name\"");
  const Match type = MatchAt(s, key, "\"type\"");
  if (name == Match::kFull || type == Match::kFull) return Match::kFull;
  if (name == Match::kPartial || type == Match::kPartial) return Match::kPartial;
  return Match::kNo;
}

Block ParseLlama3(std::string_view s, bool at_end, const std::vector<std::string>& names) {
  const Block more = at_end ? Block::Text(s.size()) : Block::Incomplete();
  size_t p = 0;
  if (s.starts_with(kPythonTag)) {
    p = SkipSpace(s, kPythonTag.size());
    if (p == s.size()) return more;
    // Built-in tools (brave_search.call(query="...")) are not JSON; they stay content.
    if (s[p] != '{') return Block::Text(p);
  }
  const JsonScan scan = ScanJson(s, p);
  if (scan.status == JsonScan::Status::kIncomplete) return more;
  if (scan.status == JsonScan::Status::kInvalid) return Block::Text(scan.end);
  std::optional<ToolCall> call = CallFromJsonText(s.substr(p, scan.end - p), names);
  if (!call) return Block::Text(scan.end);
  return Block::Calls(scan.end, {std::move(*call)});
}

// Mistral's own ids are 9 alphanumerics (its templates reject others).
bool IsMistralId(std::string_view id) {
  return id.size() == 9 && std::all_of(id.begin(), id.end(), IsAlnum);
}

Block ParseMistral(std::string_view s, bool at_end, const std::vector<std::string>& names) {
  const Block more = at_end ? Block::Text(s.size()) : Block::Incomplete();
  size_t p = SkipSpace(s, kMistralCalls.size());
  if (p == s.size()) return more;

  if (s[p] == '[') {  // [TOOL_CALLS][{"name", "arguments", "id"?}, ...]
    const JsonScan scan = ScanJson(s, p);
    if (scan.status == JsonScan::Status::kIncomplete) return more;
    if (scan.status == JsonScan::Status::kInvalid) return Block::Text(scan.end);
    const ojson array = ojson::parse(s.substr(p, scan.end - p), nullptr, /*allow_exceptions=*/false);
    if (array.is_discarded() || !array.is_array() || array.empty()) return Block::Text(scan.end);
    std::vector<ToolCall> calls;
    for (const ojson& element : array) {
      std::optional<ToolCall> call = CallFromObject(element, names);
      if (!call) return Block::Text(scan.end);
      const auto id = element.find("id");
      if (id != element.end() && id->is_string() && IsMistralId(id->get_ref<const std::string&>())) {
        call->id = id->get<std::string>();
      }
      calls.push_back(std::move(*call));
    }
    return Block::Calls(scan.end, std::move(calls));
  }

  // [TOOL_CALLS]name[ARGS]{...}, name[CALL_ID]id[ARGS]{...} or name{...}.
  const size_t name_begin = p;
  while (p < s.size() && IsNameChar(s[p])) ++p;
  if (p == s.size()) return more;
  if (p == name_begin) return Block::Text(p);
  const std::string_view name = s.substr(name_begin, p - name_begin);
  std::string id;
  Match m = MatchAt(s, p, kMistralCallId);
  if (m == Match::kPartial) return more;
  if (m == Match::kFull) {
    p += kMistralCallId.size();
    const size_t id_begin = p;
    while (p < s.size() && IsAlnum(s[p])) ++p;
    if (p == s.size()) return more;
    id = std::string(s.substr(id_begin, p - id_begin));
  }
  m = MatchAt(s, p, kMistralArgs);
  if (m == Match::kPartial) return more;
  if (m == Match::kFull) p += kMistralArgs.size();
  p = SkipSpace(s, p);
  if (p == s.size()) return more;
  if (s[p] != '{') return Block::Text(p);
  const JsonScan scan = ScanJson(s, p);
  if (scan.status == JsonScan::Status::kIncomplete) return more;
  if (scan.status == JsonScan::Status::kInvalid) return Block::Text(scan.end);
  const ojson args = ojson::parse(s.substr(p, scan.end - p), nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded()) return Block::Text(scan.end);
  std::optional<ToolCall> call = CallFromParts(name, &args, names);
  if (!call) return Block::Text(scan.end);
  if (IsMistralId(id)) call->id = std::move(id);
  return Block::Calls(scan.end, {std::move(*call)});
}

// One call's text between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>: V3 and R1 write
// `function<｜tool▁sep｜>NAME\n```json\n{...}\n````, V3.1 writes `NAME<｜tool▁sep｜>{...}`.
std::optional<ToolCall> DeepSeekCall(std::string_view body, const std::vector<std::string>& names) {
  const size_t sep = body.find(kDsSep);
  if (sep == std::string_view::npos) return std::nullopt;
  const std::string_view head = Trim(body.substr(0, sep));
  const std::string_view rest = body.substr(sep + kDsSep.size());
  std::string_view name;
  std::string_view json;
  if (Trim(rest).starts_with('{')) {
    name = head;
    json = Trim(rest);
  } else {
    const size_t newline = rest.find('\n');
    if (newline == std::string_view::npos) return std::nullopt;
    name = Trim(rest.substr(0, newline));
    json = Trim(rest.substr(newline + 1));
    if (json.starts_with("```")) {
      json.remove_prefix(3);
      if (json.starts_with("json")) json.remove_prefix(4);
      json = Trim(json);
      if (json.ends_with("```")) json.remove_suffix(3);
      json = Trim(json);
    }
  }
  const ojson args = ojson::parse(json, nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded()) return std::nullopt;
  return CallFromParts(name, &args, names);
}

Block ParseDeepSeek(std::string_view s, bool at_end, const std::vector<std::string>& names) {
  const Block more = at_end ? Block::Text(s.size()) : Block::Incomplete();
  std::vector<ToolCall> calls;
  size_t p = kDsCallsBegin.size();
  while (true) {
    p = SkipSpace(s, p);
    if (p == s.size()) {
      // The model stopped after a complete call without closing the block.
      if (at_end && !calls.empty()) return Block::Calls(p, std::move(calls));
      return more;
    }
    const Match end = MatchAt(s, p, kDsCallsEnd);
    if (end == Match::kFull) {
      p += kDsCallsEnd.size();
      if (calls.empty()) return Block::Text(p);
      return Block::Calls(p, std::move(calls));
    }
    const Match begin = MatchAt(s, p, kDsCallBegin);
    if (begin == Match::kFull) {
      const size_t body = p + kDsCallBegin.size();
      const size_t close = s.find(kDsCallEnd, body);
      if (close == std::string_view::npos) return more;
      std::optional<ToolCall> call = DeepSeekCall(s.substr(body, close - body), names);
      p = close + kDsCallEnd.size();
      if (!call) return Block::Text(p);
      calls.push_back(std::move(*call));
      continue;
    }
    if (end == Match::kPartial || begin == Match::kPartial) return more;
    return Block::Text(p);
  }
}

// kNone parses as kHermes (see ParseToolCalls).
ToolFormat Effective(ToolFormat format) { return format == ToolFormat::kNone ? ToolFormat::kHermes : format; }

Match BlockStart(ToolFormat format, std::string_view s, size_t pos) {
  switch (format) {
    case ToolFormat::kLlama3:
      return Llama3Start(s, pos);
    case ToolFormat::kMistral:
      return MatchAt(s, pos, kMistralCalls);
    case ToolFormat::kDeepSeekV3:
      return MatchAt(s, pos, kDsCallsBegin);
    case ToolFormat::kNone:
    case ToolFormat::kHermes:
      break;
  }
  return MatchAt(s, pos, kHermesOpen);
}

Block ParseBlock(ToolFormat format, std::string_view s, bool at_end, const std::vector<std::string>& names) {
  switch (format) {
    case ToolFormat::kLlama3:
      return ParseLlama3(s, at_end, names);
    case ToolFormat::kMistral:
      return ParseMistral(s, at_end, names);
    case ToolFormat::kDeepSeekV3:
      return ParseDeepSeek(s, at_end, names);
    case ToolFormat::kNone:
    case ToolFormat::kHermes:
      break;
  }
  return ParseHermes(s, at_end, names);
}

std::vector<std::string> ToolNames(const nlohmann::json& tools) {
  std::vector<std::string> names;
  if (!tools.is_array()) return names;
  for (const auto& tool : tools) {
    if (!tool.is_object()) continue;
    const auto function = tool.find("function");
    if (function == tool.end() || !function->is_object()) continue;
    const auto name = function->find("name");
    if (name != function->end() && name->is_string()) names.push_back(name->get<std::string>());
  }
  return names;
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A value for an error message, cut so that a huge field does not flood the response.
std::string Shown(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

bool IsValidFunctionName(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), IsNameChar);
}

}  // namespace

std::string_view ToolFormatName(ToolFormat format) {
  switch (format) {
    case ToolFormat::kNone:
      return "none";
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kLlama3:
      return "llama3";
    case ToolFormat::kMistral:
      return "mistral";
    case ToolFormat::kDeepSeekV3:
      return "deepseek_v3";
  }
  return "none";
}

ToolFormat DetectToolFormat(std::string_view src) {
  const auto has = [&](std::string_view marker) { return src.find(marker) != std::string_view::npos; };
  if (has(kDsCallsBegin)) return ToolFormat::kDeepSeekV3;
  if (has(kMistralCalls)) return ToolFormat::kMistral;
  if (has(kLlamaIpythonHeader) || has(kPythonTag)) return ToolFormat::kLlama3;
  if (has(kHermesOpen)) return ToolFormat::kHermes;
  return ToolFormat::kNone;
}

std::string MakeToolCallId(ToolFormat format, uint64_t seed, size_t call_index) {
  static constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  uint64_t index_state = call_index;
  uint64_t state = seed ^ SplitMix64(&index_state);
  const bool mistral = format == ToolFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  const int n = mistral ? 9 : 24;
  for (int i = 0; i < n; ++i) id += kAlnum[SplitMix64(&state) % kAlnum.size()];
  return id;
}

ToolCallStreamParser::ToolCallStreamParser(ToolFormat format, const nlohmann::json& tools, uint64_t id_seed)
    : format_(Effective(format)), tool_names_(ToolNames(tools)), id_seed_(id_seed) {}

std::vector<ToolStreamEvent> ToolCallStreamParser::Feed(std::string_view delta) {
  if (finished_) return {};
  buf_.append(delta);
  Run(/*at_end=*/false);
  return std::exchange(events_, {});
}

std::vector<ToolStreamEvent> ToolCallStreamParser::Finish() {
  if (finished_) return {};
  Run(/*at_end=*/true);
  pending_ws_.clear();
  finished_ = true;
  return std::exchange(events_, {});
}

void ToolCallStreamParser::Run(bool at_end) {
  const std::string_view buf(buf_);
  size_t pos = 0;  // buf[0, pos) has been released
  while (true) {
    if (in_block_) {
      Block block = ParseBlock(format_, buf.substr(pos), at_end, tool_names_);
      if (block.status == Block::Status::kIncomplete) {
        if (!at_end) break;
        block = Block::Text(buf.size() - pos);
      }
      in_block_ = false;
      if (block.status == Block::Status::kCalls) {
        EmitCalls(std::move(block.calls));
      } else {
        EmitContent(buf.substr(pos, block.end));
      }
      pos += block.end;
      continue;
    }
    size_t i = pos;
    Match m = Match::kNo;
    for (; i < buf.size(); ++i) {
      const char c = buf[i];
      if (c != '<' && c != '[' && c != '{') continue;
      m = BlockStart(format_, buf, i);
      if (m != Match::kNo) break;
    }
    if (m == Match::kFull) {
      EmitContent(buf.substr(pos, i - pos));
      pos = i;
      in_block_ = true;
      continue;
    }
    // Either no marker starts in buf[pos, end), or one may start at i but is cut short.
    size_t release = i;
    if (at_end) {
      release = buf.size();
    } else if (m == Match::kNo) {
      release = pos + Utf8SafeEnd(buf.substr(pos));
    }
    EmitContent(buf.substr(pos, release - pos));
    pos = release;
    break;
  }
  buf_.erase(0, pos);
}

void ToolCallStreamParser::EmitContent(std::string_view text) {
  if (!content_started_) {
    while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    content_started_ = true;
  }
  size_t body = text.size();
  while (body > 0 && IsSpace(text[body - 1])) --body;
  if (body == 0) {
    pending_ws_.append(text);
    return;
  }
  std::string out = std::exchange(pending_ws_, std::string(text.substr(body)));
  out.append(text.substr(0, body));
  if (!events_.empty() && events_.back().kind == Event::Kind::kContent) {
    events_.back().text += out;
  } else {
    Event& e = events_.emplace_back();
    e.kind = Event::Kind::kContent;
    e.text = std::move(out);
  }
}

void ToolCallStreamParser::EmitCalls(std::vector<ToolCall> calls) {
  for (ToolCall& call : calls) {
    const size_t index = num_calls_++;
    Event& start = events_.emplace_back();
    start.kind = Event::Kind::kToolCallStart;
    start.index = index;
    start.id = call.id.empty() ? MakeToolCallId(format_, id_seed_, index) : std::move(call.id);
    start.name = std::move(call.name);
    Event& args = events_.emplace_back();
    args.kind = Event::Kind::kToolCallArgs;
    args.index = index;
    args.text = std::move(call.arguments);
  }
}

ParsedAssistant ParseToolCalls(ToolFormat format, std::string_view text, const nlohmann::json& tools,
                               uint64_t id_seed) {
  ToolCallStreamParser parser(format, tools, id_seed);
  std::vector<ToolStreamEvent> events = parser.Feed(text);
  for (ToolStreamEvent& e : parser.Finish()) events.push_back(std::move(e));
  ParsedAssistant out;
  for (ToolStreamEvent& e : events) {
    switch (e.kind) {
      case ToolStreamEvent::Kind::kContent:
        out.content += e.text;
        break;
      case ToolStreamEvent::Kind::kToolCallStart:
        out.tool_calls.push_back(ToolCall{.id = std::move(e.id), .name = std::move(e.name), .arguments = ""});
        break;
      case ToolStreamEvent::Kind::kToolCallArgs:
        out.tool_calls[e.index].arguments += e.text;
        break;
    }
  }
  return out;
}

nlohmann::json ToOpenAiDelta(const ToolStreamEvent& event) {
  using Kind = ToolStreamEvent::Kind;
  if (event.kind == Kind::kContent) return {{"content", event.text}};
  nlohmann::json call = {{"index", event.index}};
  if (event.kind == Kind::kToolCallStart) {
    call["id"] = event.id;
    call["type"] = "function";
    call["function"] = {{"name", event.name}, {"arguments", ""}};
  } else {
    call["function"] = {{"arguments", event.text}};
  }
  return {{"tool_calls", nlohmann::json::array({call})}};
}

nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls) {
  nlohmann::json out = nlohmann::json::array();
  for (const ToolCall& call : calls) {
    out.push_back({{"id", call.id},
                   {"type", "function"},
                   {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  return out;
}

std::optional<std::string> ValidateTools(const nlohmann::json& tools) {
  if (!tools.is_array()) return "tools: expected an array of tools, got " + std::string(tools.type_name());
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string path = "tools[" + std::to_string(i) + "]";
    const nlohmann::json& tool = tools[i];
    if (!tool.is_object()) return path + ": expected an object, got " + tool.type_name();
    for (const auto& [key, value] : tool.items()) {
      if (key != "type" && key != "function") {
        return path + "." + key + ": unknown field; a tool has \"type\" and \"function\"";
      }
    }
    const auto type = tool.find("type");
    if (type == tool.end()) return path + ".type: missing; expected \"function\"";
    if (*type != "function") return path + ".type: expected \"function\", got " + Shown(*type);
    const auto function = tool.find("function");
    if (function == tool.end()) return path + ".function: missing";
    if (!function->is_object()) return path + ".function: expected an object, got " + function->type_name();
    for (const auto& [key, value] : function->items()) {
      if (key != "name" && key != "description" && key != "parameters" && key != "strict") {
        return path + ".function." + key +
               ": unknown field; a function has \"name\", \"description\", \"parameters\" and \"strict\"";
      }
    }
    const auto name = function->find("name");
    if (name == function->end()) return path + ".function.name: missing";
    if (!name->is_string() || !IsValidFunctionName(name->get<std::string>())) {
      return path + ".function.name: expected 1 to 64 characters from a-z, A-Z, 0-9, '_' and '-', got " +
             Shown(*name);
    }
    for (size_t j = 0; j < i; ++j) {
      if (tools[j]["function"]["name"] == *name) {
        return path + ".function.name: " + Shown(*name) + " is also the name of tools[" + std::to_string(j) + "]";
      }
    }
    const auto description = function->find("description");
    if (description != function->end() && !description->is_string()) {
      return path + ".function.description: expected a string, got " + description->type_name();
    }
    const auto parameters = function->find("parameters");
    if (parameters != function->end() && !parameters->is_object()) {
      return path + ".function.parameters: expected a JSON Schema object, got " + parameters->type_name();
    }
    const auto strict = function->find("strict");
    if (strict != function->end() && !strict->is_boolean()) {
      return path + ".function.strict: expected a boolean, got " + strict->type_name();
    }
  }
  return std::nullopt;
}

std::optional<std::string> ValidateToolChoice(const nlohmann::json& choice, const nlohmann::json& tools,
                                              ToolChoice* out) {
  const std::vector<std::string> names = ToolNames(tools);
  *out = ToolChoice{};
  if (choice.is_null()) {
    out->mode = names.empty() ? ToolChoiceMode::kNone : ToolChoiceMode::kAuto;
    return std::nullopt;
  }
  static constexpr std::string_view kExpected =
      "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
  if (choice.is_string()) {
    const std::string& s = choice.get_ref<const std::string&>();
    if (s == "none") {
      out->mode = ToolChoiceMode::kNone;
    } else if (s == "auto") {
      out->mode = ToolChoiceMode::kAuto;
    } else if (s == "required") {
      if (names.empty()) return "tool_choice: \"required\" needs at least one function in tools";
      out->mode = ToolChoiceMode::kRequired;
    } else {
      return "tool_choice: " + std::string(kExpected) + ", got " + Shown(choice);
    }
    return std::nullopt;
  }
  if (!choice.is_object()) return "tool_choice: " + std::string(kExpected) + ", got " + choice.type_name();
  for (const auto& [key, value] : choice.items()) {
    if (key != "type" && key != "function") return "tool_choice." + key + ": unknown field; " + std::string(kExpected);
  }
  const auto type = choice.find("type");
  if (type == choice.end()) return "tool_choice.type: missing; expected \"function\"";
  if (*type != "function") return "tool_choice.type: expected \"function\", got " + Shown(*type);
  const auto function = choice.find("function");
  if (function == choice.end()) return "tool_choice.function: missing";
  if (!function->is_object()) return "tool_choice.function: expected an object, got " + std::string(function->type_name());
  for (const auto& [key, value] : function->items()) {
    if (key != "name") return "tool_choice.function." + key + ": unknown field; expected only \"name\"";
  }
  const auto name = function->find("name");
  if (name == function->end()) return "tool_choice.function.name: missing";
  if (!name->is_string()) return "tool_choice.function.name: expected a string, got " + std::string(name->type_name());
  if (!Contains(names, name->get_ref<const std::string&>())) {
    return "tool_choice.function.name: " + Shown(*name) + " is not the name of a function in tools";
  }
  out->mode = ToolChoiceMode::kFunction;
  out->name = name->get<std::string>();
  return std::nullopt;
}

Result<std::string> ToolCallGrammar(ToolFormat format, const nlohmann::ordered_json& tools, const ToolChoice& choice,
                                    bool parallel) {
  using grammar::GbnfLiteral;
  std::string rules;
  std::vector<std::string> calls;  // one rule per callable tool
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::ordered_json& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (choice.mode == ToolChoiceMode::kFunction && name != choice.name) continue;
    const std::string prefix = "t" + std::to_string(i) + "-";
    auto params = fn.find("parameters");
    Result<std::string> args = params == fn.end() || params->is_null()
                                   ? Result<std::string>(grammar::JsonObjectGbnf(prefix))
                                   : grammar::JsonSchemaToGbnf(*params, prefix);
    if (!args.ok()) return args.status().WithContext(fmt::format("tools[{}].function.parameters: ", i));
    rules += *args;
    const std::string a = prefix + "root";
    std::string call;
    switch (format) {
      case ToolFormat::kLlama3:
        call = GbnfLiteral("{\"name\": \"" + name + "\", \"parameters\": ") + " " + a + " " + GbnfLiteral("}");
        break;
      case ToolFormat::kMistral:
        call = GbnfLiteral("{\"name\": \"" + name + "\", \"arguments\": ") + " " + a + " " + GbnfLiteral("}");
        break;
      case ToolFormat::kDeepSeekV3:
        call = GbnfLiteral(std::string(kDsCallBegin) + "function" + std::string(kDsSep) + name + "\n```json\n") +
               " " + a + " " + GbnfLiteral("\n```" + std::string(kDsCallEnd));
        break;
      case ToolFormat::kHermes:
      case ToolFormat::kNone:
        call = GbnfLiteral("<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": ") + " " + a + " " +
               GbnfLiteral("}\n</tool_call>");
        break;
    }
    rules += fmt::format("call-{} ::= {}\n", i, call);
    calls.push_back(fmt::format("call-{}", i));
  }
  if (calls.empty()) return InvalidArgument("tool_choice: no offered tool matches");
  std::string call_alt;
  for (size_t i = 0; i < calls.size(); ++i) call_alt += (i ? " | " : "") + calls[i];
  rules += "call ::= " + call_alt + "\n";
  // A named function is called once; "required" allows parallel calls where the format has them.
  const bool many = choice.mode == ToolChoiceMode::kRequired && parallel;
  switch (format) {
    case ToolFormat::kLlama3:
      rules += "root ::= call\n";
      break;
    case ToolFormat::kMistral:
      rules += std::string("root ::= ") + GbnfLiteral("[TOOL_CALLS][") + " call" +
               (many ? " (" + GbnfLiteral(", ") + " call)*" : "") + " " + GbnfLiteral("]") + "\n";
      break;
    case ToolFormat::kDeepSeekV3:
      rules += "root ::= " + GbnfLiteral(kDsCallsBegin) + " call" + (many ? "+" : "") + " " +
               GbnfLiteral(kDsCallsEnd) + "\n";
      break;
    case ToolFormat::kHermes:
    case ToolFormat::kNone:
      rules += std::string("root ::= call") + (many ? " (" + GbnfLiteral("\n") + " call)*" : "") + "\n";
      break;
  }
  return rules;
}

}  // namespace dspark::serve
