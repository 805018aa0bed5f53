// Temporary files for tests: one private directory per test process, removed with everything in
// it when the process exits. Header-only so that tests of any folder (gguf, tokenizer, model, ...)
// can use it without linking a library above their own.
#pragma once

#include <stdlib.h>  // mkdtemp
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

namespace dspark::testing {

// This process's directory <::testing::TempDir()>/dspark_<pid>_XXXXXX, created on first use
// (thread-safe). Per process: ctest runs every case as its own process, in parallel, and a file
// rewritten under another process's mmap would crash it (SIGBUS).
//
// Removed recursively at normal exit (static destruction, also after exit() from a test), so
// tests need not delete what they write there; a crashed or killed process leaves it behind. A
// forked child (a death test) never removes its parent's directory.
inline const std::string& ProcessTempDir() {
  struct Dir {
    std::string path;
    pid_t owner = getpid();
    bool created = false;

    Dir() {
      std::string tmpl = ::testing::TempDir();
      if (!tmpl.empty() && tmpl.back() != '/') tmpl += '/';
      tmpl += "dspark_" + std::to_string(owner) + "_XXXXXX";
      path = tmpl;
      created = mkdtemp(tmpl.data()) != nullptr;
      if (created) {
        path = tmpl;
        return;
      }
      // path names a directory that does not exist, so later writes fail and name it.
      const int err = errno;
      ADD_FAILURE() << "testing: cannot create a temp directory " << path << ": " << std::strerror(err)
                    << " (set TEST_TMPDIR to a writable directory)";
    }
    ~Dir() {
      if (!created || getpid() != owner) return;
      std::error_code ec;  // best effort: never throw during exit
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

// A path named `name` (a file or a directory to create) in ProcessTempDir().
inline std::string TempPath(const std::string& name) { return ProcessTempDir() + "/" + name; }

}  // namespace dspark::testing
