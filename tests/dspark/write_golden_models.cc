// Writes the tiny target and dflash drafts that tests/data/dspark/make_golden.py reads:
//   dspark_write_golden_models DIR
#include <cstdio>

#include "dspark/dspark_models.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  dspark::Status s = dspark::testing::WriteGoldenModels(argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
