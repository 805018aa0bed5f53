// `dspark tokenize`: prints token ids as llama.cpp's `llama-tokenize --ids` does: [1, 2, 3].
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/escapes.h"

namespace dspark::cli {

namespace {
struct TokenizeFlags {
  std::string model;
  std::string prompt;
  bool from_stdin = false;
  bool no_bos = false;
  bool parse_special = false;
  bool escape = true;
};

int RunTokenize(const TokenizeFlags& f) {
  auto file = gguf::File::Open(f.model);
  if (!file.ok()) return Fail(file.status());
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) return Fail(tok.status());
  std::string text;
  if (f.from_stdin) text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  // -p reads escapes as `generate -p` and llama-tokenize do, so both commands see the same text.
  else text = f.escape ? ProcessEscapes(f.prompt) : f.prompt;
  EncodeOptions eo;
  eo.add_bos = !f.no_bos;
  eo.add_eos = false;
  eo.parse_special = f.parse_special;
  const std::vector<int32_t> ids = (*tok)->Encode(text, eo);
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  std::printf("%s]\n", out.c_str());
  return 0;
}
}  // namespace

Runner RegisterTokenize(CLI::App& app) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text");
  sub->add_option("-m,--model", f->model, "Model or vocabulary GGUF")->required();
  auto* p = sub->add_option("-p,--prompt", f->prompt, "Text to tokenize (escapes such as \\n are processed unless --no-escape)");
  auto* s = sub->add_flag("--stdin", f->from_stdin, "Read the text from standard input");
  p->excludes(s);
  sub->add_flag("--no-bos", f->no_bos, "Do not add BOS even if the vocabulary asks for it");
  sub->add_flag("-e,--escape,!--no-escape", f->escape,
                "Process escapes in -p (\\n \\r \\t \\' \\\" \\\\ \\xHH), as llama.cpp does; on by default");
  sub->add_flag("--parse-special", f->parse_special, "Recognise special tokens written as text");
  sub->callback([p, s] {
    if (p->count() == 0 && s->count() == 0) throw CLI::RequiredError("-p or --stdin");
  });
  return [f] { return RunTokenize(*f); };
}

}  // namespace dspark::cli
