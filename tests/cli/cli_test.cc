// The `dspark` command line as a user runs it: the binary itself, on the bundled reference target.
// Covers what the libraries' tests cannot see: how a prompt reaches the engine (-p with llama.cpp's
// escapes, -f), and what bad invocations print.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Single-quotes `s` for /bin/sh.
std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dspark_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CliRun Dspark(const std::string& args) {
    const fs::path out = dir_ / "out", err = dir_ / "err";
    const std::string cmd = ShellQuote(DSPARK_CLI) + " " + args + " >" + out.string() + " 2>" + err.string();
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadAll(out);
    r.err = ReadAll(err);
    return r;
  }
  std::string Model() const { return ShellQuote(std::string(DSPARK_SOURCE_DIR) + "/models/ref-target.gguf"); }
  fs::path Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

  fs::path dir_;
};

// The value of "key":<integer> in a JSON object printed on one line.
long JsonInt(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\":(-?[0-9]+)"))) return -1;
  return std::stol(m[1]);
}

TEST_F(Cli, PromptEscapesAndFileReachTheEngineAsTheSameText) {
  const std::string text = "def add(a, b):\n    \"\"\"Return the sum.\"\"\"\n";
  const fs::path file = Write("prompt.txt", text);
  const CliRun escaped = Dspark("generate -m " + Model() + " -p " +
                             ShellQuote(R"(def add(a, b):\n    \"\"\"Return the sum.\"\"\"\n)") + " -n 6 --json");
  const CliRun from_file = Dspark("generate -m " + Model() + " -f " + ShellQuote(file.string()) + " -n 6 --json");
  const CliRun literal = Dspark("generate -m " + Model() + " --no-escape -p " +
                             ShellQuote(R"(def add(a, b):\n    \"\"\"Return the sum.\"\"\"\n)") + " -n 6 --json");
  ASSERT_EQ(escaped.exit_code, 0) << escaped.err;
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  ASSERT_EQ(literal.exit_code, 0) << literal.err;
  const long n_escaped = JsonInt(escaped.out, "prompt_tokens");
  ASSERT_GT(n_escaped, 0) << escaped.out;
  EXPECT_EQ(n_escaped, JsonInt(from_file.out, "prompt_tokens"));
  // The same prompt gives the same greedy continuation.
  const auto ids = [](const std::string& json) {
    std::smatch m;
    return std::regex_search(json, m, std::regex("\"ids\":\\[([0-9,]*)\\]")) ? m[1].str() : std::string("?");
  };
  EXPECT_EQ(ids(escaped.out), ids(from_file.out));
  // Without escapes the backslashes are text: a different (longer) prompt.
  EXPECT_GT(JsonInt(literal.out, "prompt_tokens"), n_escaped);
}

TEST_F(Cli, CompareReportsTheSpeedupAndPrintsTheTextOnce) {
  const CliRun r = Dspark("generate -m " + Model() + " -p 'def add(a, b):\\n' -n 16 --spec-type ngram --compare");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("speed-up"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("outputs identical"), std::string::npos) << r.err;
  EXPECT_FALSE(r.out.empty());
  const CliRun plain = Dspark("generate -m " + Model() + " -p 'def add(a, b):\\n' -n 16");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(r.out, plain.out) << "--compare prints the speculative text once, as plain decoding streams it";
}

// A DeepSeek-shaped model written with a multi-token-prediction block drafts for itself
// (--spec-type draft-mtp, no -md), with output identical to plain decoding; a model without the
// block is refused with the reason.
TEST_F(Cli, SynthWithNextnDraftsForItselfWithMtp) {
  const std::string ds = (dir_ / "ds.gguf").string(), plain = (dir_ / "ds_plain.gguf").string();
  const std::string vocab = " --vocab " + Model();
  ASSERT_EQ(Dspark("synth deepseek-v3-mini " + ds + " --layers 2 --nextn 1 --type Q8_0" + vocab).exit_code, 0);
  const CliRun r = Dspark("generate -m " + ds + " -p 'def add(a, b):\n' -n 16 --spec-type draft-mtp --compare -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("outputs identical"), std::string::npos) << r.err;
  ASSERT_EQ(Dspark("synth deepseek-v3-mini " + plain + " --layers 2 --type Q8_0" + vocab).exit_code, 0);
  const CliRun none = Dspark("generate -m " + plain + " -p 'def' -n 4 --spec-type draft-mtp");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("nextn_predict_layers"), std::string::npos) << none.err;
}

TEST_F(Cli, CompareFailsWhenGreedyOutputsDiffer) {
  // A synthetic drafter that gets every other token wrong, verified by a rule that accepts every
  // draft token unchecked: the speculative text differs from plain decoding, and --compare must
  // say so and fail, in text and in JSON.
  const std::string args = "generate -m " + Model() +
                           " -p 'def add(a, b):\\n' -n 24 --spec-type synthetic --spec-synthetic-accept 0.5 "
                           "--spec-draft-n-max 4 --compare --debug-verifier accept-all";
  const CliRun text = Dspark(args);
  EXPECT_NE(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("outputs DIFFER"), std::string::npos) << text.err;
  const CliRun json = Dspark(args + " --json");
  EXPECT_NE(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"identical\":false"), std::string::npos) << json.out;
  // The same drafter under the correct rule: identical, exit status 0.
  const CliRun good = Dspark("generate -m " + Model() +
                             " -p 'def add(a, b):\\n' -n 24 --spec-type synthetic --spec-synthetic-accept 0.5 "
                             "--spec-draft-n-max 4 --compare");
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_NE(good.err.find("outputs identical"), std::string::npos) << good.err;
}

TEST_F(Cli, ChatRendersTheTemplateAroundThePromptAndTheSystemMessage) {
  const fs::path tmpl = Write("chat.jinja",
                              "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                              "{% if add_generation_prompt %}[assistant] {% endif %}");
  const CliRun chat = Dspark("generate -m " + Model() + " --chat --chat-template-file " + ShellQuote(tmpl.string()) +
                             " --system-prompt 'Be brief.' -p 'def add(a, b):' -n 4 --json");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  // The same text as a plain prompt: the same tokens (the template writes no BOS, so one is added;
  // 26 tokens, against 29 if the newlines were the two characters \n).
  const CliRun tokens =
      Dspark("tokenize -m " + Model() + " -p " + ShellQuote("[system] Be brief.\n[user] def add(a, b):\n[assistant] "));
  ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
  const long n_tokens = static_cast<long>(std::count(tokens.out.begin(), tokens.out.end(), ',')) + 1;
  EXPECT_EQ(JsonInt(chat.out, "prompt_tokens"), n_tokens) << tokens.out;
  EXPECT_EQ(n_tokens, 26);

  // The bundled model's own template (ChatML): the default system message, the user turn and the
  // assistant header around the prompt.
  const CliRun own = Dspark("generate -m " + Model() + " --chat -p x -n 4 --json");
  ASSERT_EQ(own.exit_code, 0) << own.err;
  const CliRun chatml = Dspark(
      "tokenize -m " + Model() + " -p " +
      ShellQuote("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n"
                 "<|im_start|>assistant\n"));
  ASSERT_EQ(chatml.exit_code, 0) << chatml.err;
  EXPECT_EQ(JsonInt(own.out, "prompt_tokens"), static_cast<long>(std::count(chatml.out.begin(), chatml.out.end(), ',')) + 1);
  const CliRun no_chat = Dspark("generate -m " + Model() + " --system-prompt x -p x -n 4");
  EXPECT_NE(no_chat.exit_code, 0);
  EXPECT_NE(no_chat.err.find("need --chat"), std::string::npos) << no_chat.err;
}

TEST_F(Cli, TokenizeReadsEscapesAsGenerateDoes) {
  // `generate -p 'a\nb'` sees a newline; `tokenize -p` must tokenize the same text, or a check of
  // one command against the other compares different prompts.
  const CliRun real = Dspark("tokenize -m " + Model() + " -p " + ShellQuote("def f():\n    return 1\n"));
  const CliRun escaped = Dspark("tokenize -m " + Model() + " -p " + ShellQuote("def f():\\n    return 1\\n"));
  const CliRun literal = Dspark("tokenize -m " + Model() + " --no-escape -p " + ShellQuote("def f():\\n    return 1\\n"));
  ASSERT_EQ(real.exit_code, 0) << real.err;
  ASSERT_EQ(escaped.exit_code, 0) << escaped.err;
  ASSERT_EQ(literal.exit_code, 0) << literal.err;
  EXPECT_EQ(escaped.out, real.out);
  EXPECT_NE(literal.out, real.out);
  const CliRun gen = Dspark("generate -m " + Model() + " -p " + ShellQuote("def f():\\n    return 1\\n") + " -n 1 --json");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(JsonInt(gen.out, "prompt_tokens"), static_cast<long>(std::count(real.out.begin(), real.out.end(), ',')) + 1);
}

TEST_F(Cli, BadPromptArgumentsAreClearErrors) {
  const CliRun none = Dspark("generate -m " + Model() + " -n 4");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("give a prompt with -p TEXT or -f FILE"), std::string::npos) << none.err;

  const fs::path file = Write("p.txt", "x");
  const CliRun both = Dspark("generate -m " + Model() + " -p x -f " + ShellQuote(file.string()) + " -n 4");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;

  const CliRun missing = Dspark("generate -m " + Model() + " -f " + ShellQuote((dir_ / "nope.txt").string()) + " -n 4");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("cannot read prompt file"), std::string::npos) << missing.err;
}

TEST_F(Cli, AKvCacheBeyondTheMachinesMemoryIsAClearErrorAtStart) {
  // 2e9 tokens x 64 slots of this model's keys and values: more bytes than an x86-64 process can
  // even address, so no kernel setting lets the allocation through.
  // Under AddressSanitizer (make test-asan) the allocator must answer as libc's does, with null.
  const char* set = std::getenv("ASAN_OPTIONS");
  const std::string before = set != nullptr ? set : "";
  setenv("ASAN_OPTIONS", (before + ":allocator_may_return_null=1").c_str(), 1);
  const CliRun r = Dspark("serve --port 0 --parallel 64 -m " + Model() + " -c 2000000000");
  if (set != nullptr)
    setenv("ASAN_OPTIONS", before.c_str(), 1);
  else
    unsetenv("ASAN_OPTIONS");
  EXPECT_EQ(r.exit_code, 1) << r.err;  // an exit, not a signal (-1)
  EXPECT_NE(r.err.find("out of memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lower -c or --parallel"), std::string::npos) << r.err;
}

TEST_F(Cli, BenchSpecReportsAcceptancePerDraftPosition) {
  // bench --spec on the bundled target, 2 prompts, fixed 4-token drafts. An oracle drafter
  // (synthetic, every token the target's) keeps every position; one that is always wrong keeps
  // none; the draft model's counts must add up to its totals, position by position.
  const std::string prompts = ShellQuote(std::string(DSPARK_SOURCE_DIR) + "/bench/prompts/code-completion.jsonl");
  auto bench = [&](const std::string& drafter, const std::string& out) {
    const CliRun r = Dspark("bench --spec -m " + Model() + " --prompts " + prompts +
                            " --max-prompts 2 -n 24 -r 1 -t 1 --sweep adaptive=0 --sweep cost=0 --spec-draft-n-max 4 " +
                            drafter + " -o " + ShellQuote((dir_ / out).string()));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("acceptance per draft position"), std::string::npos) << r.out;
    return nlohmann::json::parse(ReadAll(dir_ / (out + ".json")));
  };
  for (const auto& [accept, rate] : {std::pair{"1", 1.0}, std::pair{"0", 0.0}}) {
    const auto j = bench(std::string("--spec-type synthetic --spec-synthetic-accept ") + accept, "synthetic");
    const auto& s = j["settings"].at(0);
    ASSERT_EQ(s["kept_per_position"].size(), 4u) << s.dump();
    for (double a : s["kept_per_position"]) EXPECT_DOUBLE_EQ(a, rate) << s.dump();
    EXPECT_EQ(s["identical"], 2);
  }
  const auto j = bench("--spec-type draft-simple -md " +
                           ShellQuote(std::string(DSPARK_SOURCE_DIR) + "/models/ref-draft.gguf"), "draft");
  const auto& s = j["settings"].at(0);
  const auto& drafted = s["drafted_per_position"];
  const auto& kept = s["accepted_per_position"];
  const auto& rate = s["kept_per_position"];
  ASSERT_EQ(drafted.size(), 4u) << s.dump();
  ASSERT_EQ(kept.size(), 4u);
  EXPECT_EQ(drafted[0].get<int64_t>(), s["drafts"].get<int64_t>());
  int64_t sum_drafted = 0, sum_kept = 0;
  for (size_t i = 0; i < 4; ++i) {
    sum_drafted += drafted[i].get<int64_t>();
    sum_kept += kept[i].get<int64_t>();
    EXPECT_LE(kept[i].get<int64_t>(), drafted[i].get<int64_t>());
    if (i > 0) {
      EXPECT_LE(kept[i].get<int64_t>(), kept[i - 1].get<int64_t>());  // keeping i keeps i-1
    }
    EXPECT_NEAR(rate[i].get<double>(), double(kept[i].get<int64_t>()) / double(drafted[i].get<int64_t>()), 1e-9);
  }
  EXPECT_EQ(sum_drafted, s["drafted"].get<int64_t>());
  EXPECT_EQ(sum_kept, s["accepted"].get<int64_t>());
  EXPECT_GT(sum_kept, 0);
  EXPECT_LT(sum_kept, sum_drafted);
  EXPECT_EQ(s["identical"], 2);
}

}  // namespace
