// `dspark info`: metadata, tensor table, sizes and types of a GGUF file.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "gguf/gguf.h"

namespace dspark::cli {

namespace {
int RunInfo(const std::string& path, bool all_tensors) {
  auto file = gguf::File::Open(path);
  if (!file.ok()) return Fail(file.status());
  const gguf::File& f = **file;
  std::printf("file: %s\nversion: %u, alignment: %llu, size: %.2f MB, data at byte %llu\n", path.c_str(), f.version(),
              static_cast<unsigned long long>(f.alignment()), f.file_size() / 1e6,
              static_cast<unsigned long long>(f.data_offset()));
  std::printf("\nmetadata (%zu):\n", f.metadata().size());
  for (const auto& [key, value] : f.metadata())
    std::printf("  %-48s %-8s %s\n", key.c_str(), std::string(gguf::ValueTypeName(value.type)).c_str(),
                value.ToString().c_str());
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // type -> (count, bytes)
  uint64_t params = 0, bytes = 0;
  std::printf("\ntensors (%zu):\n", f.tensors().size());
  size_t shown = 0;
  for (const auto& t : f.tensors()) {
    auto& e = by_type[std::string(DTypeName(t.type))];
    ++e.first;
    e.second += t.nbytes;
    params += t.NumElements();
    bytes += t.nbytes;
    if (all_tensors || shown < 40) {
      std::printf("  %-40s %-8s %-20s %10.3f MB  @%llu\n", t.name.c_str(), std::string(DTypeName(t.type)).c_str(),
                  t.ShapeString().c_str(), t.nbytes / 1e6, static_cast<unsigned long long>(t.file_offset));
      ++shown;
    }
  }
  if (shown < f.tensors().size()) std::printf("  ... %zu more (use --all)\n", f.tensors().size() - shown);
  std::printf("\nparameters: %.3f M, tensor data: %.2f MB (%.2f bits/weight)\n", params / 1e6, bytes / 1e6,
              params ? 8.0 * bytes / params : 0.0);
  for (const auto& [type, e] : by_type)
    std::printf("  %-8s %5llu tensors %10.2f MB\n", type.c_str(), static_cast<unsigned long long>(e.first), e.second / 1e6);
  return 0;
}
}  // namespace

Runner RegisterInfo(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("info", "Print a GGUF file's metadata and tensor table");
  sub->add_option("model", *path, "GGUF file")->required();
  sub->add_flag("--all", *all, "List every tensor");
  return [path, all] { return RunInfo(*path, *all); };
}

}  // namespace dspark::cli
