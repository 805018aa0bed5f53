// `dspark bench --serve URL`: the load benchmark of a running `dspark serve`. Kept out
// of cmd_bench.cc, which only forwards to it.
#pragma once

#include <memory>

#include <CLI/CLI.hpp>

namespace dspark::cli {

struct ServeBenchFlags;

// Adds --serve and its --serve-* options to `bench`.
std::shared_ptr<ServeBenchFlags> AddServeBenchFlags(CLI::App* bench);
// True when --serve was given.
bool ServeBenchRequested(const ServeBenchFlags& flags);
int RunServeBench(const ServeBenchFlags& flags);

}  // namespace dspark::cli
