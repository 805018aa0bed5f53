// Status and Result<T>: how every input-caused error travels in dspark. Library code never throws
// and never aborts on bad input; it returns a Status whose message names the subject (file, key,
// tensor, byte offset), the expected and actual values, and a hint where one helps.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace dspark {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // caller or user input is wrong (flags, JSON, sampling values)
  kNotFound,         // file, key or tensor missing
  kDataLoss,         // corrupt or truncated file
  kUnimplemented,    // valid input we do not support (unknown architecture, tensor type)
  kOutOfRange,       // context full, position out of range
  kResourceExhausted,
  kInternal,
  kUnavailable,
  kCancelled,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Prepends context ("loading model: ") to the message, keeping the code.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status InvalidArgument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status NotFound(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status DataLoss(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kDataLoss, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status Unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnimplemented, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status OutOfRange(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kOutOfRange, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status Internal(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInternal, fmt::format(f, std::forward<Args>(args)...));
}

// Holds either a T or a non-OK Status (std::expected is C++23).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace dspark

#define DSPARK_CONCAT_INNER(a, b) a##b
#define DSPARK_CONCAT(a, b) DSPARK_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define DSPARK_TRY(expr)                                \
  do {                                                  \
    ::dspark::Status dspark_try_status_ = (expr);       \
    if (!dspark_try_status_.ok()) return dspark_try_status_; \
  } while (0)

#define DSPARK_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

// `DSPARK_ASSIGN_OR_RETURN(auto x, MakeX());`
#define DSPARK_ASSIGN_OR_RETURN(lhs, expr) \
  DSPARK_ASSIGN_OR_RETURN_IMPL(DSPARK_CONCAT(dspark_result_, __LINE__), lhs, expr)

// Programmer errors only (never user input): always on, abort with file:line.
#define DSPARK_CHECK(cond)                                                        \
  do {                                                                            \
    if (!(cond)) ::dspark::CheckFailed(__FILE__, __LINE__, #cond, std::string()); \
  } while (0)
#define DSPARK_CHECK_MSG(cond, msg)                                         \
  do {                                                                      \
    if (!(cond)) ::dspark::CheckFailed(__FILE__, __LINE__, #cond, (msg));   \
  } while (0)
#ifdef NDEBUG
#define DSPARK_DCHECK(cond) \
  do {                      \
  } while (0)
#else
#define DSPARK_DCHECK(cond) DSPARK_CHECK(cond)
#endif
