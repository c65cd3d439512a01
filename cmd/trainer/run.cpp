// `trainer run CONFIG [--set k=v]... [--cpu N] [--gpus LIST] [--threads N] [--run-dir DIR]`
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "cmd/trainer/command.h"
#include "core/engine/fit.h"
#include "core/engine/interrupt.h"

namespace trainer::cli {
namespace {

struct RunArgs {
  std::string config, gpus, run_dir, runs_root = "runs";
  std::vector<std::string> sets;
  int cpu = 0, threads = 0;
  bool json = false;
};

extern "C" void on_signal(int) {
  // First signal: stop at the next step boundary. Second: leave at once.
  if (interrupt_requests().fetch_add(1) >= 1) std::_Exit(kInterrupted);
}

int run(const RunArgs& a) {
  std::vector<std::string> sets = a.sets;
  for (const std::string& s : device_overrides(a.gpus, a.cpu)) sets.push_back(s);
  if (a.threads > 0) sets.push_back("devices.threads=" + std::to_string(a.threads));
  Experiment e = load_experiment(a.config, sets);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  FitOptions o;
  o.run_dir = a.run_dir;
  o.runs_root = a.runs_root;
  o.terminal = isatty(fileno(stdout));
  FitResult r = fit(e, o);
  if (a.json) {
    std::string m;
    for (const auto& [k, v] : r.last) m += fmt::format(", \"{}\": {}", k, v);
    fmt::print("{{\"run_dir\": \"{}\", \"epochs\": {}, \"interrupted\": {}, \"images_per_second\": {:.1f}{}}}\n", r.run_dir,
               r.epochs_done, r.interrupted, r.images_per_second, m);
  }
  return r.interrupted ? kInterrupted : kOk;
}

const RegisterCommand reg({"run", "Train the model a config describes", [](CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("config", a->config, "Experiment YAML file")->required();
  app.add_option("--set", a->sets, "Override a config key, e.g. --set optimizer.lr=0.01 (value parsed as YAML)");
  CLI::Option* gpus = app.add_option("--gpus", a->gpus, "GPUs: a count (4), ordinals (0,2 or 0,0 or 1,), or all");
  app.add_option("--cpu", a->cpu, "Train on CPU with N replicas")->check(CLI::PositiveNumber)->excludes(gpus);
  app.add_option("--threads", a->threads, "CPU compute threads per replica (default: every core)")->check(CLI::PositiveNumber);
  app.add_option("--run-dir", a->run_dir, "Write the run here (must be new or empty) instead of runs/<name>/<stamp>");
  app.add_option("--runs-root", a->runs_root, "Parent of run directories (default: runs)");
  app.add_flag("--json", a->json, "Print one machine-readable summary line at the end");
  return [a] { return run(*a); };
}});

}  // namespace
}  // namespace trainer::cli
