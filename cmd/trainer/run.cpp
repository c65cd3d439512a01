// `trainer run [CONFIG] [--resume auto|RUN_DIR|CHECKPOINT] [--set k=v]... [--cpu N] [--gpus LIST]
// [--threads N] [--run-dir DIR] [--json]`
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "cmd/trainer/command.h"
#include "cmd/trainer/restarts.h"
#include "cmd/trainer/signals.h"
#include "core/dist/launch.h"
#include "core/io/file.h"
#include "core/io/json_text.h"
#include "core/run/fit.h"
#include "core/runtime/interrupt.h"
#include "core/checkpoint/resume.h"
#include "core/io/run_dir.h"

namespace trainer::cli {
namespace {

struct RunArgs {
  std::string config, gpus, run_dir, runs_root = "runs", resume;
  std::vector<std::string> sets;
  int cpu = 0, threads = 0, max_restarts = 0;
  bool json = false;
};

// --max-restarts N: this process supervises the run, made in a child process per attempt.
int supervise(const RunArgs& a) {
  if (this_process().multi())
    throw cfg::ConfigError("--max-restarts", "restarts one process on one machine; under mpirun or srun, let the launcher "
                                             "restart the job (e.g. srun --requeue) with --resume auto");
  std::string config = a.config;
  if (config.empty() && !a.resume.empty() && a.resume != "auto") config = config_of(a.resume);
  if (config.empty()) throw cfg::ConfigError("trainer run", "give a CONFIG file (or --resume RUN_DIR|CHECKPOINT, which brings its own)");
  if (is_stream(config))  // each attempt reads the config again: a stream gives it once
    throw cfg::ConfigError("--max-restarts", "each restart reads the config again: give a CONFIG file, not standard input "
                                             "or a pipe (or restart from the run directory: --resume RUN_DIR)");
  std::vector<std::string> sets = a.sets;
  for (const std::string& s : device_overrides(a.gpus, a.cpu, a.threads)) sets.push_back(s);
  RunSpec e = load_run_spec(config, sets);  // a config error ends here, never retried
  RestartPlan p;
  p.max_restarts = a.max_restarts;
  p.run_dir = create_run_dir(a.runs_root, e.name, a.run_dir);
  p.resume = a.resume;
  p.args = {"run", config, "--runs-root", a.runs_root};
  for (const std::string& s : a.sets) p.args.insert(p.args.end(), {"--set", s});
  if (!a.gpus.empty()) p.args.insert(p.args.end(), {"--gpus", a.gpus});
  if (a.cpu > 0) p.args.insert(p.args.end(), {"--cpu", std::to_string(a.cpu)});
  if (a.threads > 0) p.args.insert(p.args.end(), {"--threads", std::to_string(a.threads)});
  if (a.json) p.args.push_back("--json");
  return run_with_restarts(p);
}

// Invalid checkpoints passed over for an older valid one are named, so a resume never silently
// goes back further than the user expects.
void warn_skipped(const std::vector<std::string>& skipped) {
  if (this_process().rank != 0) return;
  for (const std::string& s : skipped) fmt::print(stderr, "warning: passed over an invalid checkpoint: {}\n", s);
}

int run(const RunArgs& a) {
  if (a.max_restarts > 0) return supervise(a);
  std::string config = a.config;
  if (config.empty()) {
    if (a.resume.empty() || a.resume == "auto")
      throw cfg::ConfigError("trainer run", "give a CONFIG file (or --resume RUN_DIR|CHECKPOINT, which brings its own)");
    config = config_of(a.resume);
  }
  std::vector<std::string> sets = a.sets;
  for (const std::string& s : device_overrides(a.gpus, a.cpu, a.threads)) sets.push_back(s);
  install_stop_signals();  // before anything long: reading the data, choosing a checkpoint
  RunSpec e = load_run_spec(config, sets);
  FitOptions o;
  std::vector<std::string> skipped;
  if (a.resume == "auto") {
    o.resume = find_auto_checkpoint(a.runs_root, e.name, config_hash(*e.doc), &skipped);
    if (o.resume)
      o.resume_note = "the newest checkpoint of this config";
    else if (this_process().rank == 0)
      fmt::print("No checkpoint of this config under {}/{}: starting from scratch\n", a.runs_root, e.name);
  } else if (!a.resume.empty()) {
    o.resume = find_checkpoint(a.resume, &skipped);
  }
  warn_skipped(skipped);
  o.run_dir = a.run_dir;
  o.runs_root = a.runs_root;
  o.terminal = isatty(fileno(stdout));
  FitResult r = fit(e, o);
  if (a.json && this_process().rank == 0) {
    JsonLine j = {{"run_dir", r.run_dir},       {"epochs", r.epochs_done},       {"interrupted", r.interrupted},
                  {"stopped_by", r.stopped_by}, {"checkpoint", r.checkpoint},
                  {"images_per_second", json_rounded(r.images_per_second, 1)}};
    for (const auto& [k, v] : r.last) j[k] = v;
    fmt::print("{}\n", json_line(j));
  }
  if (r.interrupted && interrupt_signal().load() == SIGPIPE && this_process().rank == 0)  // the console is gone
    fmt::print(stderr, "trainer: stopped by SIGPIPE (the console's reader went away): checkpoint {}\n", r.checkpoint);
  return r.interrupted ? kInterrupted : kOk;
}

const RegisterCommand reg_run({"run", "Train the model a config describes", [](CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("config", a->config, "Experiment YAML file (optional with --resume RUN_DIR|CHECKPOINT)");
  app.add_option("--resume", a->resume,
                 "Continue from a checkpoint: auto (the newest of this config under --runs-root), a run directory "
                 "(its newest valid checkpoint) or a .safetensors/.json checkpoint");
  app.add_option("--set", a->sets, "Override a config key, e.g. --set optimizer.lr=0.01 (value parsed as YAML)");
  CLI::Option* gpus = app.add_option("--gpus", a->gpus, "GPUs: a count (4), ordinals (0,2 or 0,0 or 1,), or all");
  app.add_option("--cpu", a->cpu, "Train on CPU with N replicas")->check(CLI::PositiveNumber)->excludes(gpus);
  app.add_option("--threads", a->threads, "CPU compute threads per replica (default: every core)")->check(CLI::PositiveNumber);
  app.add_option("--run-dir", a->run_dir, "Write the run here (must be new or empty) instead of runs/<name>/<stamp>");
  app.add_option("--runs-root", a->runs_root, "Parent of run directories (default: runs)");
  app.add_flag("--json", a->json, "Print one machine-readable summary line at the end");
  app.add_option("--max-restarts", a->max_restarts,
                 "Restart the run from its newest checkpoint up to N times when it fails for a reason that is not the "
                 "user's (a lost process, the watchdog, a device error); each restart gets RUN_DIR-restart-K and a line in "
                 "RUN_DIR/restarts.log")
      ->check(CLI::NonNegativeNumber);
  return [a] { return run(*a); };
}});

}  // namespace
}  // namespace trainer::cli
