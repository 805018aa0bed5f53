// One logger for the whole library (spdlog underneath), with component tags. Library code logs
// through here and never prints to stdout: stdout belongs to the CLI's generated text.
#pragma once

#include <spdlog/spdlog.h>

namespace dspark {

enum class LogLevel { kDebug, kInfo, kWarn, kError, kOff };

// Sends every log line to stderr. Safe to call more than once.
void SetLogLevel(LogLevel level);

}  // namespace dspark

// Debug lines sit on hot paths (one per engine step): their arguments are evaluated only when
// debug logging is on.
#define DSPARK_LOG_DEBUG(...)                                                         \
  do {                                                                               \
    if (::spdlog::should_log(::spdlog::level::debug)) ::spdlog::debug(__VA_ARGS__); \
  } while (0)
#define DSPARK_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define DSPARK_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define DSPARK_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
