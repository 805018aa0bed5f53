// `dspark`: thin front end over the library. Parses flags, calls the library, prints.
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "kernels/cpu_target.h"
#include "util/log.h"

#ifndef DSPARK_VERSION
#define DSPARK_VERSION "0.0.0"
#endif

namespace dspark::cli {

int Fail(const Status& status) {
  std::fprintf(stderr, "dspark: %s\n", status.message().c_str());
  switch (status.code()) {
    case StatusCode::kInvalidArgument: return 2;
    case StatusCode::kNotFound: return 3;
    default: return 1;
  }
}

}  // namespace dspark::cli

int main(int argc, char** argv) {
  using namespace dspark::cli;
  dspark::SetLogLevel(dspark::LogLevel::kWarn);
  CLI::App app{"dspark: lossless speculative decoding for GGUF models"};
  app.set_version_flag("--version", std::string("dspark ") + DSPARK_VERSION);
  app.require_subcommand(1);
  // Before or after the subcommand: `dspark bench --cpu-target AVX2 --plain ...` times the AVX2
  // kernels on an AVX-512 machine.
  std::string cpu_target;
  app.add_option("--cpu-target", cpu_target,
                 "Run the kernels of this SIMD target instead of the best one the CPU supports (" +
                     dspark::kernels::UsableCpuTargets() + ")");
  app.fallthrough();
  std::vector<std::pair<CLI::App*, Runner>> commands;
  auto add = [&](Runner (*reg)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    Runner r = reg(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(r));
  };
  add(&RegisterGenerate);
  add(&RegisterTokenize);
  add(&RegisterInfo);
  add(&RegisterQuantize);
  add(&RegisterSynth);
  add(&RegisterBench);
  add(&RegisterServe);
  add(&RegisterPerplexity);
  // llama.cpp spells the draft model flag "-md"; CLI11 only allows one-letter short flags.
  std::vector<std::string> args;
  // Likewise "-np" (llama-server's --parallel).
  for (int i = argc - 1; i >= 1; --i) {
    const std::string a = argv[i];
    args.emplace_back(a == "-md" ? "--model-draft" : a == "-np" ? "--parallel" : a);
  }
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!cpu_target.empty())
    if (const dspark::Status st = dspark::kernels::RestrictCpuTarget(cpu_target); !st.ok()) return Fail(st);
  // Memory is the one resource a command cannot check up front: the weights, the KV cache
  // (-c tokens x --parallel slots) and the host prompt cache all come from it. A request that finds
  // none at serving time fails alone (503); here, at start-up, the command ends with what to change.
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "dspark: out of memory: the model's weights and its KV cache (-c tokens x --parallel slots) "
                 "must fit in this machine's memory; lower -c or --parallel, use --cache-type q8_0, or "
                 "choose a smaller quantisation\n");
    return 1;
  }
  return 1;
}
