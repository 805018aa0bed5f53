// The explicit list of architectures (no static self-registration: the linker would drop it).
#include "model/arch/arch.h"

namespace dspark {

namespace {
const ArchDescriptor* const kArchs[] = {&LlamaArch(), &MistralArch(), &Qwen2Arch(), &Qwen3Arch(), &Qwen3MoeArch(), &Deepseek2Arch()};
}  // namespace

const ArchDescriptor* FindArch(std::string_view name) {
  for (const ArchDescriptor* a : kArchs)
    if (a->name == name) return a;
  return nullptr;
}

std::vector<std::string_view> KnownArchs() {
  std::vector<std::string_view> names;
  for (const ArchDescriptor* a : kArchs) names.push_back(a->name);
  return names;
}

}  // namespace dspark
