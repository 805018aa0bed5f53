// dspark: LLM inference with lossless speculative decoding, as a C++ library.
//
//   #include <dspark/dspark.h>
//   namespace ds = dspark::api;
//   ds::Model model = ds::Model::Load("target.gguf");
//   ds::EngineOptions eo;
//   eo.drafter.type = "auto";
//   eo.drafter.model = "drafter.gguf";
//   ds::Engine engine(model, eo);
//   ds::GenerateResult r = engine.Generate("def fib(n):", {});
//
// The public API lives in namespace dspark::api (the engine's own classes, dspark::Model and the
// rest, are internal and not installed). These headers need C++17 and only the standard library;
// link with dspark::dspark (CMake: find_package(dspark)) or `pkg-config --cflags --libs dspark`.
// Errors are exceptions: dspark::api::Error (error.h).
#pragma once

#include <string>

#include "dspark/drafter.h"
#include "dspark/engine.h"
#include "dspark/error.h"
#include "dspark/export.h"
#include "dspark/generate.h"
#include "dspark/model.h"
#include "dspark/tokenizer.h"
#include "dspark/version.h"

namespace dspark::api {

// The library's version ("0.1.0"); DSPARK_VERSION_STRING is the headers'.
DSPARK_API const char* Version();
// The SIMD target the kernels run on ("AVX3_DL", "AVX2", ...).
DSPARK_API std::string CpuTarget();

enum class LogLevel { kDebug, kInfo, kWarn, kError, kOff };
// The engine logs warnings (a drafter that failed, ...) to stderr, never to stdout; the default
// level is kWarn. Note: the engine logs through spdlog's process-wide default logger, which the
// library replaces with its own stderr logger when it first loads a model or when this is called.
DSPARK_API void SetLogLevel(LogLevel level);

}  // namespace dspark::api
