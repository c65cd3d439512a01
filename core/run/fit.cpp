// A training run: plan, data, the strategy's trainees, the observer, then every trainee's epoch
// loop on its own thread (the strategy ends them all when one fails).
#include "core/run/fit.h"

#include <fmt/format.h>

#include <chrono>

#include "core/checkpoint/init_from.h"
#include "core/dist/launch.h"
#include "core/dist/mpi_world.h"
#include "core/run/epoch_loop.h"
#include "core/run/observer.h"
#include "core/run/plan.h"
#include "core/runtime/strategy.h"

namespace trainer {
namespace {

// Every process of a multi-process job must run the same config on as many replicas: checked
// before anything is trained (a mismatch would deadlock or silently diverge).
void check_same_job(const RunSpec& e, int local) {
  const std::string mine = fmt::format("{} {}", config_hash(*e.doc), local);
  std::vector<std::string> all = mpi::allgather(mine);
  for (size_t q = 1; q < all.size(); ++q)
    if (all[q] != all[0])
      throw cfg::ConfigError(e.doc->file, fmt::format("process {} runs another config or replica count than process 0 "
                                                      "(config hash and replicas '{}' vs '{}'): every process of the job "
                                                      "must get the same config, overrides and devices",
                                                      q, all[q], all[0]));
}

}  // namespace

FitResult fit(const RunSpec& e, const FitOptions& o) {
  const std::optional<CheckpointInfo>& from = o.resume;
  RunPlan plan = plan_run(e, from);
  if (plan.processes > 1) check_same_job(e, plan.local_replicas);
  DataSetup data = setup_data(e, DataShards{plan.replicas, plan.first_rank, plan.local_replicas, plan.batch, plan.eval_batch},
                              o.base_dir);
  int64_t steps = data.train_loaders[0]->batches_per_epoch();
  if (e.train.steps_per_epoch > 0) steps = std::min(steps, e.train.steps_per_epoch);
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
  if (plan.process == 0) obs = std::make_unique<Observer>(e, o, data.stats.get(), result);
  auto say = [&](const std::string& s) {
    if (obs) obs->line(s);
  };
  say(fmt::format("Run directory: {}", result.run_dir));
  if (from) {
    say(fmt::format("Resuming from {}: epoch {}, step {}/{}{}{}", from->weights, from->state.epoch + 1,
                    from->state.step_in_epoch, plan.steps_per_epoch, o.resume_note.empty() ? "" : "; ", o.resume_note));
    if (from->state.config_hash != config_hash(*e.doc))
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
  LoopSetup run{e, plan, data, *schedule, from, obs.get(), {0}, {}};
  auto t0 = std::chrono::steady_clock::now();
  strategy->run([&](Trainee& w) { train_epochs(w, run); });
  result.stopped_by = run.stopped_by;
  result.interrupted = result.stopped_by == "interrupt";
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.images_per_second = secs > 0 ? double(run.images) / secs : 0;
  return result;
}

}  // namespace trainer
