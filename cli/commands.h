// Subcommands of the `dspark` binary. Each Register* adds its CLI11 subcommand and returns the
// function to run when it was chosen; the function returns the process exit code.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "util/status.h"

namespace dspark::cli {

using Runner = std::function<int()>;

Runner RegisterGenerate(CLI::App& app);
Runner RegisterTokenize(CLI::App& app);
Runner RegisterInfo(CLI::App& app);
Runner RegisterQuantize(CLI::App& app);
Runner RegisterSynth(CLI::App& app);
Runner RegisterBench(CLI::App& app);
Runner RegisterServe(CLI::App& app);
Runner RegisterPerplexity(CLI::App& app);

// Prints "dspark: <message>" to stderr and returns the exit code for a failed status.
int Fail(const Status& status);

}  // namespace dspark::cli
