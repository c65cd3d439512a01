// Subcommand registry: each subcommand's file adds itself; main() only dispatches.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace trainer::cli {

// Exit codes (README "Exit codes").
enum Exit { kOk = 0, kInternal = 1, kUsage = 2, kData = 3, kDevice = 4, kInterrupted = 130 };

struct Command {
  std::string name, help;
  // Declares the subcommand's options on `app` and returns what runs it.
  std::function<std::function<int()>(CLI::App& app)> setup;
};

std::vector<Command>& commands();

// --gpus / --cpu as config overrides: "--gpus 4" is four GPUs (0..3), "--gpus 0" GPU 0,
// "--gpus 0,2" (or "1," for GPU 1 alone) ordinals, "--gpus all" every visible GPU; "--cpu N" is N
// CPU replicas; "--threads N" compute threads per replica. A malformed or too large value is a
// usage error (cfg::ConfigError naming the option).
std::vector<std::string> device_overrides(const std::string& gpus, int cpu, int threads = 0);
// For the commands that run one copy of the model (eval, predict, generate): "--gpus N" names GPU N
// (as their help says), not a count — "N," for device_overrides; anything else unchanged.
std::string one_gpu(const std::string& gpus);
struct RegisterCommand {
  explicit RegisterCommand(Command c) { commands().push_back(std::move(c)); }
};

}  // namespace trainer::cli
