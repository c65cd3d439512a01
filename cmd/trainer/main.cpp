// trainer: entry point — parses the command line, dispatches to a subcommand and maps errors
// to the documented exit codes with one clear line on stderr.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>

#include "cmd/trainer/command.h"
#include "cmd/trainer/openmp_env.h"
#include "core/data/dataset.h"
#include "core/dist/launch.h"
#include "core/dist/mpi_world.h"
#include "core/runtime/failure.h"
#include "core/io/config.h"
#include "core/ops/fast_paths.h"

namespace trainer::cli {

std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}

}  // namespace trainer::cli

using namespace trainer;

namespace {

// A command-line mistake as one line on stderr (CLI11 adds a second, "Run with --help ...",
// and prints ranges as 0.000000 to 1.8e308): what is wrong, and where to read the usage.
std::string usage_error_line(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::string msg = e.what();
  std::vector<std::string> names;
  for (const cli::Command& c : cli::commands()) names.push_back(c.name);
  std::string command;
  for (CLI::App* sub : app.get_subcommands()) command = sub->get_name();
  if (command.empty() && argc > 1 && argv[1][0] != '-') {
    std::string word = argv[1];
    if (std::find(names.begin(), names.end(), word) == names.end())
      return fmt::format("'{}' is not a trainer command{}; commands: {} (see trainer --help)", word,
                         cfg::suggestion(word, names), fmt::join(names, ", "));
  }
  // "--cpu: Value 0 not in range 0.000000 to 1797...": CLI::PositiveNumber / NonNegativeNumber.
  size_t v = msg.find(": Value "), r = msg.find(" not in range ");
  if (v != std::string::npos && r != std::string::npos && r > v) {
    std::string option = msg.substr(0, v), value = msg.substr(v + 8, r - v - 8);
    const char* want = "in range";
    for (CLI::App* sub : app.get_subcommands({}))
      if (CLI::Option* o = sub->get_option_no_throw(option)) {
        try {
          for (int i = 0;; ++i) {  // CLI11 names these validators in their description only
            const std::string d = o->get_validator(i)->get_description();
            if (d == "POSITIVE") want = "a positive number";
            if (d == "NONNEGATIVE") want = "a number of 0 or more";
          }
        } catch (const CLI::Error&) {  // past the last validator
        }
      }
    msg = fmt::format("{}: expected {}, not '{}'", option, want, value);
  }
  for (char& c : msg)
    if (c == '\n') c = ' ';
  while (!msg.empty() && msg.back() == ' ') msg.pop_back();
  return fmt::format("{} (see trainer {}{}--help)", msg, command, command.empty() ? "" : " ");
}

}  // namespace

// The command line of one process: parse, run the subcommand, map errors to exit codes.
int run_command(int argc, char** argv) {
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
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "%s\n", printable(usage_error_line(app, e, argc, argv)).c_str());
    return cli::kUsage;
  }
  try {
    FastPaths::from_env();  // a typo in TRAINER_FAST_PATHS: one line and exit 2 before any work
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "TRAINER_FAST_PATHS=%s: %s\n", printable(std::getenv("TRAINER_FAST_PATHS")).c_str(),
                 printable(e.what()).c_str());
    return cli::kUsage;
  }
  try {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
    return cli::kUsage;
  } catch (...) {
    Failure f = describe_failure(std::current_exception());
    // In a job of several processes the others may be waiting for this one in a collective, unless
    // every process raised the same failure (they disagree at start).
    if (this_process().multi() && !f.everywhere) abort_job(f);
    report(f);
    return f.code;
  }
}

int main(int argc, char** argv) {
  cli::prepare_openmp(argv);  // may start this program again, with GOMP_SPINCOUNT set or the binding removed
  // Under mpirun or srun: one process of a job, its place from the launcher, MPI initialised.
  Launch l = detect_launch();
  if (l.multi()) {
    if (!mpi::built()) {
      std::fprintf(stderr, "device error: started as process %d of %d (by %s), but this trainer was built without MPI "
                           "(install libopenmpi-dev and rebuild: scripts/setup.sh)\n", l.rank, l.size, l.launcher.c_str());
      return cli::kDevice;
    }
    try {
      mpi::init(&argc, &argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "device error: %s\n", e.what());
      return cli::kDevice;
    }
    l.rank = mpi::rank();
    l.size = mpi::size();
  }
  set_this_process(l);
  if (std::string note = cli::binding_note(); !note.empty() && l.rank == 0) std::fprintf(stderr, "%s\n", note.c_str());
  int code = run_command(argc, argv);
  mpi::finalize();
  return code;
}
