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
struct RegisterCommand {
  explicit RegisterCommand(Command c) { commands().push_back(std::move(c)); }
};

}  // namespace trainer::cli
