// Conformance with llama.cpp: every `.out` line of every vocabulary in tests/data/vocab/ (and of the
// reference models' vocabulary in tests/data/golden/) (llama.cpp's
// test-tokenizer-0 vectors) must be reproduced exactly, with no BOS/EOS and parse_special off.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tokenizer/tokenizer.h"

namespace dspark {
namespace {

const std::string kVocabDir = fmt::format("{}/tests/data/", DSPARK_SOURCE_DIR);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// As test-tokenizer-0's read_tests: inputs split on "\n__ggml_vocab_test__\n"; output lines
// stripped and split on single spaces.
std::vector<Case> ReadCases(const std::string& name, std::string* error) {
  const std::string raw = ReadFile(kVocabDir + name + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream outs(ReadFile(kVocabDir + name + ".out"));
  std::vector<Case> cases;
  size_t i = 0;
  for (std::string line; std::getline(outs, line); ++i) {
    const size_t b = line.find_first_not_of(" \t\r\n");
    const size_t e = line.find_last_not_of(" \t\r\n");
    line = b == std::string::npos ? "" : line.substr(b, e - b + 1);
    Case c;
    if (i < inputs.size()) c.text = inputs[i];
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  if (cases.size() != inputs.size() || cases.empty()) {
    *error = fmt::format("input and output files have different numbers of tests ({} vs {})",
                         inputs.size(), cases.size());
  }
  return cases;
}

std::string IdsToString(const std::vector<int32_t>& ids) {
  return fmt::format("{}", fmt::join(ids, " "));
}

class VocabConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabConformance, ReproducesEveryLine) {
  const std::string name = GetParam();
  auto file = gguf::File::Open(kVocabDir + name);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto tokenizer = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  std::string error;
  const std::vector<Case> cases = ReadCases(name, &error);
  ASSERT_TRUE(error.empty()) << name << ": " << error;

  EncodeOptions opts;
  opts.add_bos = false;
  opts.add_eos = false;
  size_t passed = 0;
  std::string first_failure;
  for (const Case& c : cases) {
    const std::vector<int32_t> got = (*tokenizer)->Encode(c.text, opts);
    if (got == c.ids) {
      ++passed;
    } else if (first_failure.empty()) {
      first_failure = fmt::format("text '{}'\n  expected: {}\n  got:      {}", c.text,
                                  IdsToString(c.ids), IdsToString(got));
    }
  }
  std::cout << "[ conformance ] " << name << ": " << passed << "/" << cases.size()
            << " lines\n";
  EXPECT_EQ(passed, cases.size()) << name << ": first mismatch: " << first_failure;
}

INSTANTIATE_TEST_SUITE_P(
    Vocabs, VocabConformance,
    // llama.cpp's vectors for real vocabularies, and the bundled reference models' vocabulary with
    // the ids SentencePiece produced for the training data (train/inference tokenisation must agree).
    ::testing::Values("vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-phi-3.gguf",
                      "vocab/ggml-vocab-llama-bpe.gguf", "vocab/ggml-vocab-qwen2.gguf",
                      "vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-deepseek-llm.gguf",
                      "vocab/ggml-vocab-deepseek-coder.gguf", "golden/ref-vocab.gguf"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      std::string n = info.param.substr(info.param.find('/') + 1);
      if (n.rfind("ggml-vocab-", 0) == 0) n = n.substr(11);
      n = n.substr(0, n.size() - 5);  // .gguf
      for (char& ch : n) {
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return n;
    });

}  // namespace
}  // namespace dspark
