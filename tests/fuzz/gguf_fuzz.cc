// GGUF reader and model load: any byte string either fails with a Status or yields a file whose
// tensors lie inside it; a file that loads as a model runs a two-token forward pass.
#include <cstdint>
#include <cstdio>
#include <memory>

#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "util/log.h"

using namespace dspark;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  SetLogLevel(LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::ScratchPath("model.gguf");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  auto file = gguf::File::Open(path);
  if (!file.ok()) return 0;
  for (const auto& t : (*file)->tensors()) {
    volatile uint8_t sink = t.nbytes > 0 ? t.data[t.nbytes - 1] : 0;  // the tensor's last byte is mapped
    (void)sink;
  }
  auto model = Model::FromFile(std::shared_ptr<const gguf::File>(std::move(*file)), ModelOptions{.repack = false});
  if (!model.ok()) return 0;
  const ModelConfig& c = (*model)->config();
  // Tiny configurations only: a fuzzed file may declare dimensions whose cache would be large.
  if (static_cast<int64_t>(c.n_layer) * c.n_head_kv * (c.head_dim + c.head_dim_v) > (1 << 16)) return 0;
  KvCache cache(c, 1, 8);
  ThreadPool pool(1);
  Batch b;
  b.Add(0, 0, 0, false);
  b.Add(c.n_vocab - 1, 1, 0, true);
  auto out = (*model)->Forward(b, cache, pool);
  if (out.ok() && out->logits.size() != static_cast<size_t>(c.n_vocab)) fuzz::Fail("logits of the wrong size");
  return 0;
}
