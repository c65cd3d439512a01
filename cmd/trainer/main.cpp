// trainer: entry point — parses the command line, dispatches to a subcommand and maps errors
// to the documented exit codes with one clear line on stderr.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <map>

#include "cmd/trainer/command.h"
#include "core/data/dataset.h"
#include "core/engine/devices.h"
#include "core/io/config.h"

namespace trainer::cli {

std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}

}  // namespace trainer::cli

using namespace trainer;

int main(int argc, char** argv) {
  CLI::App app{"trainer: train neural networks described in YAML on CPU cores or GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "trainer 0.1.0");
  std::map<CLI::App*, std::function<int()>> runs;
  for (const cli::Command& c : cli::commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runs[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help/version (code 0) or the error
    return code == 0 ? cli::kOk : cli::kUsage;
  }
  try {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
    return cli::kUsage;
  } catch (const cfg::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return cli::kUsage;
  } catch (const DataError& e) {
    std::fprintf(stderr, "data error: %s\n", e.what());
    return cli::kData;
  } catch (const DeviceError& e) {
    std::fprintf(stderr, "device error: %s\n", e.what());
    return cli::kDevice;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return cli::kInternal;
  }
}
