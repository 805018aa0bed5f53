// DSPARK_API marks what libdspark.so exports. The library is built with -fvisibility=hidden and
// links the engine's static libraries with --exclude-libs,ALL, so the facade below (namespace
// dspark::api) is its whole ABI: no engine symbol, and none of Highway, spdlog or fmt, is visible
// to programs that link it.
#pragma once

#if defined(_WIN32)
#if defined(DSPARK_BUILDING_LIBRARY)
#define DSPARK_API __declspec(dllexport)
#else
#define DSPARK_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define DSPARK_API __attribute__((visibility("default")))
#else
#define DSPARK_API
#endif
