// Shared pieces of the libFuzzer targets (tests/fuzz/README.md).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace dspark::fuzz {

// A finding: libFuzzer reports the abort with the input that caused it.
[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  std::abort();
}

// A per-process scratch file in memory (/dev/shm when present) for APIs that read paths.
inline const std::string& ScratchPath(const char* name) {
  static const std::string path = [name] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/dspark_fuzz_" + std::to_string(getpid()) + "_" + name;
  }();
  return path;
}

}  // namespace dspark::fuzz
