// A training run: plan, data, the strategy's trainees, the observer, then every trainee's epoch
// loop on its own thread (the strategy ends them all when one fails).
#include "core/run/fit.h"

#include <fmt/format.h>

#include <chrono>

#include "core/checkpoint/init_from.h"
#include "core/dist/agreement.h"
#include "core/dist/launch.h"
#include "core/run/epoch_loop.h"
#include "core/run/observer.h"
#include "core/run/plan.h"
#include "core/runtime/failure.h"
#include "core/runtime/interrupt.h"
#include "core/runtime/progress.h"
#include "core/runtime/strategy.h"
#include "core/runtime/watchdog.h"

namespace trainer {
namespace {

// What every process of a multi-process job must hold equal, compared at start (agreement.h):
// a difference would pair all-reduces of different steps (silent mis-training), then hang.
// The job: checked before the data is opened, so a config difference is named before whatever
// it makes a process's data do.
std::vector<AgreedField> job_fields(const RunSpec& e, const RunPlan& plan, const std::optional<CheckpointInfo>& from) {
  const std::string config = "every process must get the same config file and --set overrides";
  const std::string devices = "every process must be given as many devices of one kind (--cpu N, --gpus)";
  std::string resume = "none";
  if (from) resume = fmt::format("global step {} of config {}", from->state.global_step, from->state.config_hash);
  return {{"processes in the job", std::to_string(plan.processes), kExitUsage, "the launcher gave processes different worlds"},
          {"precision", precision_name(e.precision), kExitUsage, config},
          {"strategy", strategy_name(plan.strategy), kExitUsage, config},
          {"replicas per process", std::to_string(plan.local_replicas), kExitUsage, devices},
          {"device kind", plan.devices.empty() ? "none" : plan.devices[0].kind == DeviceKind::CPU ? "cpu" : "cuda",
           kExitUsage, devices},
          {"global batch", std::to_string(plan.global_batch), kExitUsage, config},
          {"config hash", plan.config_hash, kExitUsage, config},
          {"resume point", resume, kExitData, "every process must resume from the same checkpoint"}};
}

// The data: every process opens the whole of each set and its loaders take their replicas' shards
// of every global batch, so the sets themselves, and the steps of an epoch, must be the same.
std::vector<AgreedField> data_fields(const DataSetup& d, int64_t steps) {
  const std::string same = "every process must see the same data";
  auto size = [](const std::shared_ptr<Dataset>& s) { return s ? std::to_string(s->size()) : std::string("none"); };
  auto content = [](const std::shared_ptr<Dataset>& s) { return s ? content_fingerprint(*s) : std::string("none"); };
  return {{"train set size", size(d.train), kExitData, same},
          {"validation set size", size(d.val), kExitData, same},
          {"train data fingerprint (first, middle and last samples)", content(d.train), kExitData, same},
          {"validation data fingerprint (first, middle and last samples)", content(d.val), kExitData, same},
          {"steps per epoch", std::to_string(steps), kExitData, same}};
}

// The watchdog found a stall: one line per rank, the last completed step's checkpoint when one is
// at hand (process 0, a CPU model), then the whole job ends with exit code 5.
[[noreturn]] void on_stall(const StallReport& r, Observer* obs, StepSnapshot* snapshot, const ProgressBoard& board) {
  const Launch& p = this_process();
  const std::string prefix = p.multi() ? fmt::format("process {}/{}: ", p.rank, p.size) : "";
  std::fflush(stdout);
  for (const std::string& l : r.lines) std::fprintf(stderr, "%s%s\n", prefix.c_str(), l.c_str());
  if (!board.shared() && p.multi())
    std::fprintf(stderr, "%swatchdog: the other processes' ranks are not seen from here (no shared progress board)\n",
                 prefix.c_str());
  std::string saved = "no checkpoint: ";
  if (!obs) saved += "process 0 writes them";
  else if (!snapshot) saved += "the last step is kept only for a model on the CPU";
  else {
    std::lock_guard<std::mutex> lock(snapshot->mu);
    if (!snapshot->valid) {
      saved += "no step had completed";
    } else if (snapshot->train.global_step <= snapshot->saved_step) {
      saved = fmt::format("the newest checkpoint (global step {}) is as recent as the last completed step: --resume "
                          "continues from it", snapshot->saved_step);
    } else {
      try {
        const TrainState& s = snapshot->train;
        saved = fmt::format("checkpoint {} (epoch {} step {}, global step {}): --resume continues from it",
                            obs->save(snapshot->state, s), s.epoch + 1, s.step_in_epoch, s.global_step);
      } catch (const std::exception& x) {
        saved = fmt::format("no checkpoint: writing it failed: {}", x.what());
      }
    }
  }
  std::fprintf(stderr, "%swatchdog: %s\n", prefix.c_str(), saved.c_str());
  std::fflush(stderr);
  abort_job(Failure{kExitStalled, r.summary});
}

}  // namespace

FitResult fit(const RunSpec& e, const FitOptions& o) {
  const std::optional<CheckpointInfo>& from = o.resume;
  RunPlan plan = plan_run(e, from);
  if (plan.processes > 1) check_processes_agree(job_fields(e, plan, from));
  DataSetup data = setup_data(e, DataShards{plan.replicas, plan.first_rank, plan.local_replicas, plan.batch, plan.eval_batch},
                              o.base_dir);
  int64_t steps = data.train_loaders[0]->batches_per_epoch();
  if (e.train.steps_per_epoch > 0) steps = std::min(steps, e.train.steps_per_epoch);
  // Every rank marks where it is on the progress board (the watchdog reads it). In a job of several
  // processes it is a shared file: made before the agreement below (a collective), removed by
  // process 0 after it, when every process has it mapped, so no kill can leave it behind.
  ProgressBoard board(plan.replicas, plan.first_rank, plan.local_replicas, plan.processes > 1);
  if (plan.processes > 1) check_processes_agree(data_fields(data, steps));
  board.remove_file();
  plan.with_steps(steps, data.train->size());
  std::unique_ptr<Strategy> strategy = strategy_type(plan.strategy).make(plan.trainee, plan.devices, plan.threads);
  ModelState& lead = strategy->trainee(0).state();

  // Weights come in before the run directory exists, so a checkpoint or init.from that does not
  // fit the model fails without leaving an empty run behind. Rank 0 runs on this thread.
  std::vector<std::string> init_lines;
  if (from)
    load_checkpoint(*from, lead, true);
  else if (!e.init.from.empty())
    init_lines = init_from(e.init, o.base_dir, lead);

  // Only the job's first process writes the run directory and prints; the others train silently.
  FitResult result;
  std::unique_ptr<Observer> obs;
  if (plan.process == 0) obs = std::make_unique<Observer>(e, o, data.stats.get(), data.train->class_names(), result);
  auto say = [&](const std::string& s) {
    if (obs) obs->line(s);
  };
  say(fmt::format("Run directory: {}", result.run_dir));
  if (from) {
    say(fmt::format("Resuming from {}: epoch {}, step {}/{}{}{}", from->weights, from->state.epoch + 1,
                    from->state.step_in_epoch, plan.steps_per_epoch, o.resume_note.empty() ? "" : "; ", o.resume_note));
    if (from->state.config_hash != plan.config_hash)
      say("Note: this config differs from the checkpoint's (beyond devices and checkpoint settings)");
  }
  const std::vector<std::string> banner = plan.banner(e);
  say(banner[0]);  // the model
  say(fmt::format("Train: {}", data.train->describe()));
  say(data.val ? fmt::format("Val:   {}", data.val->describe()) : std::string("Val:   none"));
  for (size_t i = 1; i < banner.size(); ++i) say(banner[i]);
  for (const std::string& l : init_lines) say(l);
  if (from && from->state.epoch >= e.train.epochs) {
    say(fmt::format("The checkpoint is at the end of epoch {} of {}: nothing left to train", from->state.epoch, e.train.epochs));
    result.epochs_done = from->state.epoch;
    result.last = from->state.last;
    return result;
  }

  auto schedule = make_schedule(e.schedule, e.train.epochs);
  StepSnapshot snapshot;
  LoopSetup run{e, plan, data, *schedule, from, obs.get(), {0}, {}, {}, nullptr};
  // The watchdog ends a run in which a rank stops making progress.
  std::unique_ptr<Watchdog> watchdog;
  if (e.train.watchdog_s > 0) {
    if (obs && !plan.devices.empty() && plan.devices[0].is_cpu()) run.snapshot = &snapshot;
    // Process 0 reports; another process only when process 0 cannot (stopped itself).
    const double delay = plan.process == 0 ? 0.0 : std::max(5.0, e.train.watchdog_s / 2);
    const Launch& p = this_process();
    const std::string prefix = p.multi() ? fmt::format("process {}/{}: ", p.rank, p.size) : "";
    StallWarnings warn{[prefix](const std::string& l) { std::fprintf(stderr, "%s%s\n", prefix.c_str(), l.c_str()); },
                       plan.process == 0 ? 0 : plan.first_rank, plan.process == 0 ? plan.replicas : plan.local_replicas};
    watchdog = std::make_unique<Watchdog>(
        board, e.train.watchdog_s, delay, [&](const StallReport& r) { on_stall(r, obs.get(), run.snapshot, board); },
        std::move(warn));
  }
  auto t0 = std::chrono::steady_clock::now();
  strategy->run([&](Trainee& w) { train_epochs(w, run); });
  watchdog.reset();
  result.stopped_by = run.stopped_by;
  result.interrupted = result.stopped_by == "interrupt";
  // Process 0 said on the console where the job stopped and which checkpoint it wrote. In a job of
  // several processes each one also says on stderr that it stopped there (what `mpirun` shows when
  // it was the one interrupted: it ends the job with exit 1 and no word of its own).
  if (result.interrupted && plan.processes > 1) {
    std::fflush(stdout);
    const int sig = interrupt_signal().load();  // 0: another process was signalled
    const std::string why = sig ? " (" + signal_name(sig) + ")" : "";
    if (obs)
      fmt::print(stderr, "process 0/{}: interrupted{} {} with the whole job: checkpoint {}\n", plan.processes, why,
                 run.stopped_at, result.checkpoint);
    else
      fmt::print(stderr, "process {}/{}: interrupted{} {} with the whole job; process 0 wrote the checkpoint\n",
                 plan.process, plan.processes, why, run.stopped_at);
    std::fflush(stderr);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.images_per_second = secs > 0 ? double(run.images) / secs : 0;
  return result;
}

}  // namespace trainer
