// Writes the models of golden_models.cc: llamacpp_write_models DIR (tests/llamacpp/make_goldens.sh).
#include <cstdio>

#include "golden_models.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  for (const auto& [name, spec] : dspark::testing::LlamaCppGoldenModels()) {
    const std::string path = std::string(argv[1]) + "/" + name + ".gguf";
    dspark::Status s = dspark::WriteSynthModel(spec, nullptr, path);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), s.message().c_str());
      return 1;
    }
    std::printf("%s\n", path.c_str());
  }
  return 0;
}
