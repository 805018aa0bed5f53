// A one-line progress bar on stderr for long loads and writes; silent when stderr is not a TTY.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dspark {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO) != 0) {}
  ~ProgressBar() { Finish(); }

  void Update(uint64_t done, uint64_t total) {
    if (!tty_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const int width = 30;
    const int filled = static_cast<int>(width * done / total);
    std::fprintf(stderr, "\r%s [%.*s%*s] %5.1f%% (%.1f/%.1f MB)", label_.c_str(), filled,
                 "##############################", width - filled, "", 100.0 * done / total, done / 1e6,
                 total / 1e6);
    std::fflush(stderr);
    shown_ = true;
  }
  void Finish() {
    if (shown_) std::fprintf(stderr, "\n");
    shown_ = false;
  }

 private:
  std::string label_;
  bool tty_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace dspark
