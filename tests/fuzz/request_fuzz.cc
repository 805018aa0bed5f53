// The OpenAI request parser and validator: any body either becomes a request whose fields are in
// range or a 400 naming a field; /tokenize and /detokenize bodies likewise.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "serve/openai_schema.h"

using namespace dspark;
using namespace dspark::serve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (Endpoint e : {Endpoint::kCompletions, Endpoint::kChatCompletions}) {
    ApiRequest r;
    const auto error = ParseRequest(body, e, &r);
    if (error) {
      if (error->message.empty()) fuzz::Fail("a 400 without a message");
      continue;
    }
    const SamplingParams& s = r.sampling;
    if (s.temperature < 0 || s.top_p <= 0 || s.top_p > 1 || s.min_p < 0 || s.min_p >= 1 || s.top_k < 0)
      fuzz::Fail("accepted out-of-range sampling parameters");
    if (r.max_tokens && *r.max_tokens < 1) fuzz::Fail("accepted max_tokens < 1");
    if (r.stop.size() > 16) fuzz::Fail("accepted more than 16 stop strings");
  }
  TokenizeRequest t;
  (void)ParseTokenizeRequest(body, &t);
  std::vector<int32_t> ids;
  if (!ParseDetokenizeRequest(body, 1000, &ids))
    for (int32_t id : ids)
      if (id < 0 || id >= 1000) fuzz::Fail("accepted a token id outside the vocabulary");
  return 0;
}
