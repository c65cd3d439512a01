// One trainee's epochs: the step loop, interruption, callbacks, validation; rank 0 tells the observer.
#include "core/run/epoch_loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "core/run/callbacks.h"
#include "core/runtime/interrupt.h"
#include "core/runtime/progress.h"

namespace trainer {
namespace {

// train.ema's validation: the weights and their moving average trade places (twice: back).
void swap_average(ModelState& m) {
  std::vector<float> weights = m.download_weights(), average = m.download_average();
  m.upload_weights(average);
  m.upload_average(weights);
}

// Test hooks: TRAINER_INJECT_FAULT=<rank>:<step> makes that replica throw at that global step;
// TRAINER_TEST_SIGINT_AT_STEP=<step> makes rank 0 raise SIGINT (through the real handler) then.
std::pair<int, int64_t> injected_fault() {
  const char* f = std::getenv("TRAINER_INJECT_FAULT");
  int rank = -1;
  long long step = -1;
  if (f && std::sscanf(f, "%d:%lld", &rank, &step) == 2) return {rank, step};
  return {-1, -1};
}

int64_t sigint_step() {
  const char* s = std::getenv("TRAINER_TEST_SIGINT_AT_STEP");
  return s ? std::strtoll(s, nullptr, 10) : -1;
}

// TRAINER_TEST_HOLD=<rank>:<global step>: that rank's thread stops there for good (the
// watchdog's test: a replica that makes no progress).
std::pair<int, int64_t> held_step() {
  const char* s = std::getenv("TRAINER_TEST_HOLD");
  int rank = -1;
  long long step = -1;
  if (s && std::sscanf(s, "%d:%lld", &rank, &step) == 2) return {rank, int64_t(step)};
  return {-1, -1};
}

// TRAINER_INJECT_NONFINITE=<step>[,<step>...]: at those global steps an inf is put into one
// gradient (Trainee::inject_nonfinite), to test loss scaling's skipped steps.
std::set<int64_t> nonfinite_steps() {
  std::set<int64_t> out;
  const char* s = std::getenv("TRAINER_INJECT_NONFINITE");
  while (s && *s) {
    char* end = nullptr;
    long long v = std::strtoll(s, &end, 10);
    if (end == s) break;
    out.insert(v);
    s = *end == ',' ? end + 1 : end;
  }
  return out;
}

}  // namespace

void train_epochs(Trainee& w, LoopSetup& run) {
  const RunSpec& e = run.spec;
  const int rank = w.rank();
  const bool lead = rank == 0;
  // This process's first replica tells its fit() how the run ended (every process exits with it).
  const bool first_here = rank == run.data.first_rank;
  Observer* obs = lead ? run.observer : nullptr;
  ModelState& rep = w.state();
  Loader& train = *run.data.train_loaders[size_t(rank - run.data.first_rank)];
  Loader* val = run.data.val ? run.data.val_loaders[size_t(rank - run.data.first_rank)].get() : nullptr;
  const std::optional<CheckpointInfo>& from = run.resume;
  Callbacks cb(e.callbacks);

  TrainState st;
  // The epoch's gradient norms (clipping on): their sum and count over the updates so far.
  double norm_sum = 0;
  int64_t norm_count = 0;
  // fit() loaded rank 0 (checkpoint or init.from) already.
  if (from) {  // every replica loads the same checkpoint: no broadcast needed
    if (!lead) load_checkpoint(*from, rep, true);
    st = from->state;
    cb.restore(st.callbacks);
    w.scaler().restore(st.loss_scale);
    if (obs) obs->restore_checkpoint_state(st.callbacks.value("checkpoint", nlohmann::json::object()));
  } else {
    w.broadcast_parameters();
  }
  auto state_at = [&](int epoch, int64_t step, const LossStats& sum, int64_t global_step, const char* reason) {
    TrainState s;
    s.epoch = epoch;
    s.step_in_epoch = step;
    s.global_step = global_step;
    s.optimizer_steps = rep.optimizer_steps();
    s.loss_sum = sum.loss_sum;
    s.correct = sum.correct;
    s.count = sum.count;
    s.grad_norm_sum = step > 0 ? norm_sum : 0;
    s.grad_norm_count = step > 0 ? norm_count : 0;
    s.seed = e.seed;
    s.replicas = run.plan.replicas;
    s.global_batch = run.plan.global_batch;
    s.lr_factor = run.plan.lr_factor;
    s.config_hash = config_hash(*e.doc);
    s.reason = reason;
    if (obs) s.last = obs->result().last;
    s.callbacks = cb.state();
    if (obs) s.callbacks["checkpoint"] = obs->checkpoint_state();
    s.loss_scale = w.scaler().state();
    return s;
  };

  auto [fault_rank, fault_step] = injected_fault();
  const auto [hold_rank, hold_step] = held_step();
  // Checkpoints from rank 0, marked on the progress board (a write that never ends is a stall too).
  auto save = [&](const TrainState& s) {
    mark_phase(rank, Phase::Checkpoint);
    struct Saving {  // cleared on a throw too (a full disk)
      Saving() { interrupt_saving() = true; }
      ~Saving() { interrupt_saving() = false; }
    } saving;
    obs->save(rep, s);
    if (run.snapshot) {
      std::lock_guard<std::mutex> lock(run.snapshot->mu);
      run.snapshot->saved_step = std::max(run.snapshot->saved_step, s.global_step);
    }
    mark_phase(rank, Phase::Idle);
  };
  const int64_t sigint_at = lead ? sigint_step() : -1;
  const std::set<int64_t> poison_at = nonfinite_steps();
  LossScaler& scaler = w.scaler();
  const int64_t steps = run.plan.steps_per_epoch;
  const double base_lr = run.plan.base_lr;
  int64_t global_step = st.global_step;
  std::vector<float> best_weights;
  interrupt_checkpoints() = true;  // from here a stop signal ends in a checkpoint
  auto why = [] { return signal_name(interrupt_signal().load()); };
  for (int epoch = st.epoch; epoch < e.train.epochs; ++epoch) {
    const int64_t first = (from && epoch == st.epoch) ? st.step_in_epoch : 0;
    LossStats sum = first > 0 ? LossStats{st.loss_sum, st.correct, st.count} : LossStats{};
    norm_sum = first > 0 ? st.grad_norm_sum : 0;
    norm_count = first > 0 ? st.grad_norm_count : 0;
    auto t_epoch = std::chrono::steady_clock::now();
    if (obs) obs->begin_epoch(epoch, e.train.epochs, steps);
    train.start_epoch(epoch, first);
    if (first == 0) scaler.begin_epoch();  // a mid-epoch resume keeps the epoch's count
    // A resume from a checkpoint written during validation has no step left: its rate is the last step's.
    double lr = first < steps ? 0 : cb.adjust_lr(run.schedule.lr(base_lr, epoch, double(steps - 1) / double(steps)));
    bool stop = false, due = false;  // due: a step checkpoint fell due in this optimizer step
    Batch b;
    int64_t step = first;
    // train.accumulate k: optimizer steps of k micro-batches from the epoch's start (the last one
    // shorter; after a resume the first one starts where the checkpoint left off).
    const int k = e.train.accumulate;
    const int64_t groups = (steps + k - 1) / k;
    mark_step(rank, global_step);
    mark_phase(rank, Phase::Input);
    while (step < steps && !stop && train.next(b)) {
      if (rank == hold_rank && global_step == hold_step) {
        mark_phase(rank, Phase::Forward);
        std::fprintf(stderr, "test hook: holding rank %d at step %lld\n", rank, (long long)global_step);
        std::fflush(stderr);
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      }
      if (rank == fault_rank && global_step == fault_step)
        throw std::runtime_error(fmt::format("injected fault at step {}", global_step));
      if (global_step == sigint_at) std::raise(SIGINT);
      if (poison_at.count(global_step)) w.inject_nonfinite();
      const int64_t group = step / k, g0 = std::max(group * k, first), g1 = std::min(steps, group * k + k);
      MicroStep micro{int(step - g0), int(g1 - g0), 0};
      for (int64_t j = g0; j < g1 && k > 1; ++j) micro.samples += train.global_batch_size(j);
      // The schedule counts optimizer steps: its position is the step's (with k = 1, step / steps).
      lr = cb.adjust_lr(run.schedule.lr(base_lr, epoch, double(group) / double(groups)));
      stop = interrupted();
      uint64_t seed = (e.seed * 0x9E3779B97F4A7C15ull + uint64_t(global_step)) * 0xBF58476D1CE4E5B9ull + uint64_t(rank);
      LossStats s = w.train_step(b, float(lr), seed, stop, micro);
      sum += s;
      // (only at an optimizer step's end: an earlier micro-batch would count the previous step's norm again)
      if (const double n = w.clip().grad_norm(); micro.last() && e.train.clip.enabled() && std::isfinite(n)) {
        norm_sum += n;  // every rank measured the same norm; a skipped step has none
        ++norm_count;
      }
      ++step;
      ++global_step;
      std::string message;
      if (!cb.on_batch_end(step - 1, s.loss_sum / double(std::max<int64_t>(s.count, 1)), &message)) {
        if (obs) obs->line(message);
        if (first_here) run.stopped_by = "terminate_on_nan";
        return;  // no checkpoint of weights that produced a non-finite loss
      }
      if (lead) {
        run.images += s.count;
        if (!std::isfinite(s.loss_sum))
          throw std::runtime_error(fmt::format("the loss became {} at epoch {} step {} (callbacks.terminate_on_nan: true stops instead)",
                                               s.loss_sum, epoch + 1, step));
        double c = double(std::max<int64_t>(sum.count, 1));
        if (obs) {  // an optimizer step's end also gives TensorBoard its step/* scalars
          StepReport u;
          if (micro.last()) {
            u = {global_step, s.loss_sum / double(std::max<int64_t>(s.count, 1)), lr, s.count,
                 e.train.clip.enabled() ? w.clip().grad_norm() : NAN, scaler.enabled() ? double(scaler.scale()) : NAN};
          }
          obs->after_step(step, sum.loss_sum / c, double(sum.correct) / c, micro.last() ? &u : nullptr);
        }
        due = due || (obs && obs->due_at_step(global_step));
        // Checkpoints only between optimizer steps: nothing of a step is ever half in one.
        if (obs && step < steps && micro.last() && (stop || due))
          save(state_at(epoch, step, sum, global_step, stop ? "interrupt" : "steps"));
        if (micro.last()) due = false;
        if (StepSnapshot* snap = run.snapshot; snap && micro.last() && monotonic_ns() - snap->taken_ns >= 50 * snap->copy_ns) {
          std::lock_guard<std::mutex> lock(snap->mu);
          const int64_t t = monotonic_ns();
          snap->state.take(rep);
          snap->train = state_at(epoch, step, sum, global_step, "watchdog");
          snap->taken_ns = monotonic_ns();
          // The first copy allocates: the later ones are timed, the fastest kept (a slow one is the machine's noise).
          if (snap->valid) snap->copy_ns = snap->copy_ns > 0 ? std::min(snap->copy_ns, snap->taken_ns - t) : snap->taken_ns - t;
          snap->valid = true;
        }
      }
      mark_step(rank, global_step);  // the next one's
      mark_phase(rank, Phase::Input);
    }
    mark_phase(rank, Phase::Idle);
    if (stop && step < steps) {
      if (first_here) {
        run.stopped_by = "interrupt";
        run.stopped_at = fmt::format("at epoch {} step {}/{}", epoch + 1, step, steps);
      }
      if (obs)
        obs->line(fmt::format("Interrupted ({}) at epoch {} step {}/{}: checkpoint {}", why(), epoch + 1, step, steps,
                              obs->result().checkpoint));
      return;
    }
    double c = double(std::max<int64_t>(sum.count, 1));
    double loss = sum.loss_sum / c, acc = double(sum.correct) / c;
    Metrics console{{"loss", loss}, {"accuracy", acc}};
    Metrics row{{"accuracy", acc}, {"loss", loss}, {"lr", lr}};
    if (val) {
      bool cut = false;
      LossStats v = w.evaluate(*val, {}, &cut);
      LossStats a;
      if (!cut && e.train.ema.enabled()) {  // the same pass with the moving average in the weights' place
        swap_average(rep);
        a = w.evaluate(*val, {}, &cut);
        swap_average(rep);
      }
      if (cut) {  // every rank agreed: the epoch's training is done, its validation is not
        if (first_here) {  // every process's, not only process 0's: each one says so and exits 130
          run.stopped_by = "interrupt";
          run.stopped_at = fmt::format("during the validation of epoch {}", epoch + 1);
        }
        if (obs) {
          save(state_at(epoch, step, sum, global_step, "interrupt"));
          obs->line(fmt::format("Interrupted ({}) during the validation of epoch {}: checkpoint {} (a resume validates again)",
                                why(), epoch + 1, obs->result().checkpoint));
        }
        return;
      }
      auto loss_of = [](const LossStats& x) { return x.count ? x.loss_sum / double(x.count) : NAN; };
      auto accuracy_of = [](const LossStats& x) { return x.count ? double(x.correct) / double(x.count) : NAN; };
      console.push_back({"val_loss", loss_of(v)});
      console.push_back({"val_accuracy", accuracy_of(v)});
      row.push_back({"val_accuracy", accuracy_of(v)});
      row.push_back({"val_loss", loss_of(v)});
      if (e.train.ema.enabled()) {
        console.push_back({"val_accuracy_ema", accuracy_of(a)});
        row.push_back({"val_accuracy_ema", accuracy_of(a)});
        row.push_back({"val_loss_ema", loss_of(a)});
      }
    }
    if (scaler.enabled()) {
      row.push_back({"loss_scale", double(scaler.scale())});
      row.push_back({"skipped_steps", double(scaler.skipped_in_epoch())});
    }
    if (e.train.clip.enabled()) row.push_back({"grad_norm", norm_count > 0 ? norm_sum / double(norm_count) : NAN});
    Callbacks::EpochEnd ee = cb.on_epoch_end(epoch, row, lr);
    if (ee.snapshot_best) best_weights = rep.download_weights();
    if (ee.restore_best) rep.upload_weights(best_weights);
    if (obs) {
      obs->end_epoch(epoch, console, row, std::chrono::duration<double>(std::chrono::steady_clock::now() - t_epoch).count());
      if (scaler.enabled())
        obs->line(fmt::format("Loss scale {:g}; {} of {} steps skipped this epoch (inf/NaN gradients), {} in all",
                              scaler.scale(), scaler.skipped_in_epoch(), step, scaler.skipped_total()));
      for (const std::string& m : ee.messages) obs->line(m);
      TrainState s = state_at(epoch + 1, 0, LossStats{}, global_step, stop ? "interrupt" : "epoch");
      std::string best = obs->update_best(rep, s, row);
      if (!best.empty()) obs->line(best);
      s.callbacks["checkpoint"] = obs->checkpoint_state();
      if (obs->due_after_epoch(epoch + 1) || stop || ee.stop || epoch + 1 == e.train.epochs) save(s);
      if (stop) obs->line(fmt::format("Interrupted ({}) after epoch {}: checkpoint {}", why(), epoch + 1, obs->result().checkpoint));
    }
    if (stop || ee.stop) {
      if (first_here) {
        run.stopped_by = stop ? "interrupt" : "early_stopping";
        run.stopped_at = fmt::format("at the end of epoch {}", epoch + 1);
      }
      return;
    }
  }
}

}  // namespace trainer
