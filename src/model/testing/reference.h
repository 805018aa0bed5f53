// Helpers shared by the model tests (model_test.cc, arch_test.cc): a deterministic prompt and the
// error of the engine's logits against reference logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dspark::testing {

// n token ids spread over the vocabulary, (37 i + 11) mod n_vocab.
inline std::vector<int32_t> Prompt(int n, int n_vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 11) % n_vocab;
  return t;
}

// Max |a - b| relative to the largest reference logit magnitude.
inline double RelErr(const float* got, const std::vector<double>& want) {
  double mx = 1e-9, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, std::abs(want[i]));
    err = std::max(err, std::abs(got[i] - want[i]));
  }
  return err / mx;
}

}  // namespace dspark::testing
