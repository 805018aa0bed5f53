// Errors. Every failure the library reports is thrown as dspark::api::Error, a std::runtime_error
// whose what() is the engine's own one-line message (it names the file, key, tensor or value at
// fault) and whose code() says what kind of failure it is. Nothing else is thrown by the library
// itself, apart from std::bad_alloc; exceptions thrown by your callbacks and drafters are handled
// as Engine (engine.h) and Drafter (drafter.h) describe.
#pragma once

#include <stdexcept>
#include <string>

#include "dspark/export.h"

namespace dspark::api {

enum class ErrorCode {
  kInvalidArgument,    // the caller's input is wrong (options, sampling values, token ids, a drafter's output)
  kNotFound,           // a file, GGUF key or tensor is missing
  kDataLoss,           // a corrupt or truncated file
  kUnimplemented,      // valid input the engine does not support (architecture, tensor type)
  kOutOfRange,         // the prompt does not fit the context
  kResourceExhausted,  // out of memory for the weights or KV cache
  kInternal,           // a bug: please report it
  kUnavailable,
  kCancelled,
};

// "invalid argument", "not found", ...
DSPARK_API const char* ErrorCodeName(ErrorCode code);

class DSPARK_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ~Error() override;
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace dspark::api
