// One trainee's epochs: the step loop, interruption, callbacks, validation; rank 0 tells the observer.
#include "core/run/epoch_loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/ops/context.h"
#include "core/run/callbacks.h"
#include "core/run/epoch_times.h"
#include "core/run/test_hooks.h"
#include "core/runtime/interrupt.h"
#include "core/runtime/progress.h"

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;

// train.ema's validation: the weights and their moving average trade places (twice: back).
void swap_average(ModelState& m) {
  std::vector<float> weights = m.download_weights(), average = m.download_average();
  m.upload_weights(average);
  m.upload_average(weights);
}

double mean_loss(const LossStats& x) { return x.count ? x.loss_sum / double(x.count) : NAN; }
double accuracy(const LossStats& x) { return x.count ? double(x.correct) / double(x.count) : NAN; }

// One trainee's run of epochs: what the loop keeps between steps and epochs.
class EpochLoop {
 public:
  EpochLoop(Trainee& w, LoopSetup& run);
  void run();

 private:
  // A step launched and not yet read: its statistics (a GPU's recorded step's may still be on
  // their way) and what the loop knew of it when it ran.
  struct Launched {
    StepStats stats;
    int64_t step = 0, global_step = 0;  // the epoch's and the run's steps after it
    MicroStep micro;
    double lr = 0, grad_norm = NAN, scale = NAN;  // read with the statistics: the norm (clipping on), the loss scale (scaling on)
    bool stop = false;
    bool due = false;  // an optimizer step's last micro-batch after which a step checkpoint falls due
  };
  // The epoch's training steps from `step` on; false when the run ends here (a non-finite loss
  // with callbacks.terminate_on_nan). `stop`: every rank agreed to stop (a signal).
  bool train_steps(int epoch, int64_t first, int64_t& step, double& lr, bool& stop);
  // The launched steps whose statistics are due (all of them with `all`: the device's state must
  // then be the last step's), in order: the sums, terminate_on_nan, rank 0's after_step.
  bool read_steps(int epoch, bool all);
  // Rank 0 after a step: the progress bar, step checkpoints, the watchdog's snapshot (the last
  // two only when `current`: no later step has run).
  void after_step(int epoch, const Launched& l, const LossStats& s, bool current);
  // Whether the watchdog's snapshot would be taken now (rank 0; its cadence).
  bool snapshot_due() const;
  // The validation pass (and the moving average's), into the epoch's metrics; false when a stop
  // signal cut it (every rank agrees).
  bool validate(int epoch, int64_t step, Metrics& console, Metrics& row);
  // Callbacks, the console, best and epoch checkpoints; false when the run ends after this epoch.
  bool end_epoch(int epoch, int64_t step, bool stop, Metrics& console, Metrics& row, double lr, Clock::time_point t0);
  TrainState state_at(int epoch, int64_t step, const LossStats& sum, const char* reason) const;
  void save(const TrainState& s);  // rank 0's checkpoint, marked on the progress board
  void ended(const char* by, const std::string& at) {  // this process's first replica says how the run ended
    if (first_here_) run_.stopped_by = by, run_.stopped_at = at;
  }
  std::string why() const { return signal_name(interrupt_signal().load()); }
  // Where step `step` of `epoch` reads: the pass over the training data (the loader's epoch: its
  // shuffle and augmentation) and the batch in it. As Keras's iterator, the data continue across
  // epochs when train.steps_per_epoch is less than a pass, from the run's step count (so a resume
  // reads on where it stopped); with whole passes, pass = epoch and batch = step.
  struct DataAt {
    int64_t pass, batch;
  };
  DataAt data_at(int epoch, int64_t step) const {
    const int64_t per = train_.batches_per_epoch(), g = int64_t(epoch) * run_.plan.steps_per_epoch + step;
    return per > 0 ? DataAt{g / per, g % per} : DataAt{epoch, step};
  }

  Trainee& w_;
  LoopSetup& run_;
  const RunSpec& e_;
  const int rank_;
  const bool lead_, first_here_;
  Observer* obs_;  // rank 0's only
  ModelState& rep_;
  Loader& train_;
  Loader* val_;
  Callbacks cb_;
  const LoopTestHooks hooks_ = LoopTestHooks::from_env();
  TrainState st_;          // where the run starts (a checkpoint's, or the beginning)
  int64_t global_step_ = 0;
  LossStats sum_;          // the epoch's loss and accuracy sums so far
  double norm_sum_ = 0;    // the epoch's gradient norms (clipping on): their sum and count
  int64_t norm_count_ = 0;
  PendingSteps<Launched> launched_;  // steps whose statistics are unread (TRAINER_TEST_STATS_LAG: read late)
  EpochTimes times_;                 // where this epoch's time went so far (metrics.jsonl)
  std::vector<float> best_weights_;  // callbacks' restore_best
  int64_t pass_ = 0;                 // the pass over the training data the loader is in
};

EpochLoop::EpochLoop(Trainee& w, LoopSetup& run)
    : w_(w), run_(run), e_(run.spec), rank_(w.rank()), lead_(rank_ == 0), first_here_(rank_ == run.data.first_rank),
      obs_(lead_ ? run.observer : nullptr), rep_(w.state()),
      train_(*run.data.train_loaders[size_t(rank_ - run.data.first_rank)]),
      val_(run.data.val ? run.data.val_loaders[size_t(rank_ - run.data.first_rank)].get() : nullptr), cb_(run.spec.callbacks),
      // Several ranks read each step when `lag` later ones are launched, landed or not, so that every
      // rank acts on what it reads (terminate_on_nan) after the same steps.
      launched_(hooks_.stats_lag >= 0 ? hooks_.stats_lag : PendingSteps<Launched>::kLag, hooks_.stats_lag >= 0 || w.ranks() > 1) {
  // fit() loaded rank 0 (checkpoint or init.from) already.
  if (const std::optional<CheckpointInfo>& from = run.resume) {  // every replica loads the same checkpoint: no broadcast
    if (!lead_) load_checkpoint(*from, rep_, true);
    st_ = from->state;
    cb_.restore(st_.callbacks);
    if (cb_.restores_best() && cb_.best_epoch() >= 0) best_weights_ = load_best_weights(*from, rep_);
    w.scaler().restore(st_.loss_scale);
    if (obs_) obs_->restore_checkpoint_state(st_.callbacks.value("checkpoint", nlohmann::json::object()));
  } else {
    w.broadcast_parameters();
  }
  global_step_ = st_.global_step;
}

// The loop: for each epoch, its steps, its validation, its end (llm.c's next batch, step, log, checkpoint).
void EpochLoop::run() {
  const int64_t steps = run_.plan.steps_per_epoch;
  interrupt_checkpoints() = true;  // from here a stop signal ends in a checkpoint
  for (int epoch = st_.epoch; epoch < e_.train.epochs; ++epoch) {
    const int64_t first = (run_.resume && epoch == st_.epoch) ? st_.step_in_epoch : 0;
    sum_ = first > 0 ? LossStats{st_.loss_sum, st_.correct, st_.count} : LossStats{};
    norm_sum_ = first > 0 ? st_.grad_norm_sum : 0;
    norm_count_ = first > 0 ? st_.grad_norm_count : 0;
    const auto t0 = Clock::now();
    times_ = EpochTimes{};
    if (obs_) obs_->begin_epoch(epoch, e_.train.epochs, steps);
    const DataAt at = data_at(epoch, first);
    pass_ = at.pass;
    train_.start_epoch(at.pass, at.batch);
    if (first == 0) w_.scaler().begin_epoch();  // a mid-epoch resume keeps the epoch's count
    // A resume from a checkpoint written during validation has no step left: its rate is the last step's.
    double lr = first < steps ? 0 : cb_.adjust_lr(run_.schedule.lr(run_.plan.base_lr, epoch, double(steps - 1) / double(steps)));
    bool stop = false;
    int64_t step = first;
    if (!train_steps(epoch, first, step, lr, stop)) return;
    if (stop && step < steps) {
      ended("interrupt", fmt::format("at epoch {} step {}/{}", epoch + 1, step, steps));
      if (obs_)
        obs_->line(fmt::format("Interrupted ({}) at epoch {} step {}/{}: checkpoint {}", why(), epoch + 1, step, steps,
                               obs_->result().checkpoint));
      return;
    }
    const double c = double(std::max<int64_t>(sum_.count, 1));
    const double loss = sum_.loss_sum / c, acc = double(sum_.correct) / c;
    Metrics console{{"accuracy", acc}, {"loss", loss}};  // Keras 3's order: sorted, as its CSV
    Metrics row{{"accuracy", acc}, {"loss", loss}, {"lr", lr}};
    bool validated = true;
    if (val_) {
      Stopwatch t(times_.validation);
      validated = validate(epoch, step, console, row);
    }
    if (!validated) return;
    if (!end_epoch(epoch, step, stop, console, row, lr, t0)) return;
  }
}

bool EpochLoop::train_steps(int epoch, int64_t first, int64_t& step, double& lr, bool& stop) {
  const int64_t steps = run_.plan.steps_per_epoch;
  // train.accumulate k: optimizer steps of k micro-batches from the epoch's start (the last one
  // shorter; after a resume the first one starts where the checkpoint left off).
  const int k = e_.train.accumulate;
  const int64_t groups = (steps + k - 1) / k;
  bool due = false;  // a step checkpoint falls due in this optimizer step (rank 0: then read every step at its end)
  // The optimizer step's scored labels over its micro-batches, counted once per step (with
  // train.ignore_class the loader reads every label of each of them to count).
  int64_t counted_group = -1, group_scored = 0;
  Batch b;
  mark_step(rank_, global_step_);
  mark_phase(rank_, Phase::Input);
  // The steps' host calls and waits (validation's are its own), added to the epoch's when they end.
  const HostCallTimes calls0 = host_call_times();
  struct AddCalls {
    EpochTimes& t;
    const HostCallTimes& from;
    ~AddCalls() {
      const HostCallTimes d = host_calls_since(from);
      t.staging += 1e-9 * double(d.staging_ns);
      t.launch += 1e-9 * double(d.launch_ns);
      t.host_waits += double(d.waits);
    }
  } add_calls{times_, calls0};
  while (step < steps && !stop) {
    bool got = false;
    {
      Stopwatch t(times_.input);
      got = train_.next(b);
      if (!got) {  // the pass over the data ended inside this epoch (steps_per_epoch): the next pass
        train_.start_epoch(++pass_, 0);
        got = train_.next(b);
      }
    }
    if (!got) break;
    hooks_.before_step(rank_, global_step_, w_);
    const int64_t group = step / k, g0 = std::max(group * k, first), g1 = std::min(steps, group * k + k);
    if (k > 1 && group != counted_group) {
      group_scored = 0;
      for (int64_t j = g0; j < g1; ++j) {
        const DataAt a = data_at(epoch, j);
        group_scored += train_.global_scored(a.batch, a.pass);
      }
      counted_group = group;
    }
    const MicroStep micro{int(step - g0), int(g1 - g0), k > 1 ? group_scored : 0};
    // The schedule counts optimizer steps: its position is the step's (with k = 1, step / steps).
    lr = cb_.adjust_lr(run_.schedule.lr(run_.plan.base_lr, epoch, double(group) / double(groups)));
    stop = interrupted();
    const uint64_t seed = (e_.seed * 0x9E3779B97F4A7C15ull + uint64_t(global_step_)) * 0xBF58476D1CE4E5B9ull + uint64_t(rank_);
    Launched l;
    // Rank 0's reasons to have every launched step read after this one — a step checkpoint falling
    // due in it, the watchdog's snapshot — agreed with the other ranks as the step starts (its
    // asks), so that every rank reads, and acts on what it reads, after the same steps.
    due = due || (obs_ && obs_->due_at_step(global_step_ + 1));
    bool read = micro.last() && (due || (lead_ && snapshot_due()));
    {
      Stopwatch t(times_.step);
      l.stats = w_.step(b, float(lr), seed, stop, micro, &read);
    }
    l.micro = micro;
    l.lr = lr;
    l.stop = stop;
    l.step = ++step;
    l.global_step = ++global_step_;
    l.due = micro.last() && due;
    if (micro.last()) due = false;
    // Read at once where the device's state must be this step's: a checkpoint or the watchdog's
    // snapshot after it (`read`), a stop, the epoch's end.
    const bool now = stop || step == steps || read;
    launched_.push(std::move(l));
    if (!read_steps(epoch, now)) return false;
    mark_step(rank_, global_step_);  // the next one's
    mark_phase(rank_, Phase::Input);
  }
  mark_phase(rank_, Phase::Idle);
  return read_steps(epoch, true);  // (the loader ended early)
}

bool EpochLoop::read_steps(int epoch, bool all) {
  for (Launched l; launched_.next(l, all);) {
    LossStats s;
    {
      Stopwatch t(times_.wait);
      s = l.stats.get();
    }
    // The step's norm and scale as it reports them (read late, the host's are a later step's);
    // the norm only at an optimizer step's end (an earlier micro-batch would count the previous
    // step's again).
    if (l.micro.last() && e_.train.clip.enabled()) l.grad_norm = l.stats.grad_norm();
    if (w_.scaler().enabled()) l.scale = l.stats.loss_scale();
    Stopwatch logged(times_.log);  // less the checkpoints it writes (their own part)
    const double saved = times_.checkpoint;
    sum_ += s;
    if (std::isfinite(l.grad_norm)) {  // every rank measured the same norm; a skipped step has none
      norm_sum_ += l.grad_norm;
      ++norm_count_;
    }
    std::string message;
    if (!cb_.on_batch_end(l.step - 1, s.loss_sum / double(std::max<int64_t>(s.count, 1)), &message)) {
      if (obs_) obs_->line(message);
      ended("terminate_on_nan", "");
      return false;  // no checkpoint of weights that produced a non-finite loss
    }
    if (lead_) after_step(epoch, l, s, launched_.empty());
    times_.log -= times_.checkpoint - saved;
  }
  return true;
}

bool EpochLoop::snapshot_due() const {
  const StepSnapshot* snap = run_.snapshot;
  return snap && monotonic_ns() - snap->taken_ns >= 50 * snap->copy_ns;
}

void EpochLoop::after_step(int epoch, const Launched& l, const LossStats& s, bool current) {
  run_.images += s.count;
  if (!std::isfinite(s.loss_sum))
    throw std::runtime_error(fmt::format("the loss became {} at epoch {} step {} (callbacks.terminate_on_nan: true stops instead)",
                                         s.loss_sum, epoch + 1, l.step));
  const MicroStep& micro = l.micro;
  if (obs_) {  // an optimizer step's end also gives TensorBoard its step/* scalars
    const double c = double(std::max<int64_t>(sum_.count, 1));
    StepReport u;
    if (micro.last()) u = {l.global_step, s.loss_sum / double(std::max<int64_t>(s.count, 1)), l.lr, s.count, l.grad_norm, l.scale};
    obs_->after_step(l.step, sum_.loss_sum / c, double(sum_.correct) / c, micro.last() ? &u : nullptr);
  }
  // Checkpoints only between optimizer steps: nothing of a step is ever half in one (train_steps
  // read this step at once, so no later one has run).
  if (obs_ && current && l.step < run_.plan.steps_per_epoch && micro.last() && (l.stop || l.due))
    save(state_at(epoch, l.step, sum_, l.stop ? "interrupt" : "steps"));
  StepSnapshot* snap = run_.snapshot;
  if (!snap || !current || !micro.last() || !snapshot_due()) return;
  Stopwatch copying(times_.checkpoint);
  std::lock_guard<std::mutex> lock(snap->mu);
  const int64_t t = monotonic_ns();
  snap->state.take(rep_);
  snap->train = state_at(epoch, l.step, sum_, "watchdog");
  snap->taken_ns = monotonic_ns();
  // The first copy allocates: the later ones are timed, the fastest kept (a slow one is the machine's noise).
  if (snap->valid) snap->copy_ns = snap->copy_ns > 0 ? std::min(snap->copy_ns, snap->taken_ns - t) : snap->taken_ns - t;
  snap->valid = true;
}

bool EpochLoop::validate(int epoch, int64_t step, Metrics& console, Metrics& row) {
  bool cut = false;
  const LossStats v = w_.evaluate(*val_, {}, &cut);
  LossStats a;
  if (!cut && e_.train.ema.enabled()) {  // the same pass with the moving average in the weights' place
    swap_average(rep_);
    a = w_.evaluate(*val_, {}, &cut);
    swap_average(rep_);
  }
  if (cut) {  // every rank agreed: the epoch's training is done, its validation is not
    ended("interrupt", fmt::format("during the validation of epoch {}", epoch + 1));  // every process says so, exits 130
    if (obs_) {
      save(state_at(epoch, step, sum_, "interrupt"));
      obs_->line(fmt::format("Interrupted ({}) during the validation of epoch {}: checkpoint {} (a resume validates again)",
                             why(), epoch + 1, obs_->result().checkpoint));
    }
    return false;
  }
  console.push_back({"val_accuracy", accuracy(v)});
  console.push_back({"val_loss", mean_loss(v)});
  row.push_back({"val_accuracy", accuracy(v)});
  row.push_back({"val_loss", mean_loss(v)});
  if (e_.train.ema.enabled()) {
    console.push_back({"val_accuracy_ema", accuracy(a)});
    row.push_back({"val_accuracy_ema", accuracy(a)});
    row.push_back({"val_loss_ema", mean_loss(a)});
  }
  return true;
}

bool EpochLoop::end_epoch(int epoch, int64_t step, bool stop, Metrics& console, Metrics& row, double lr, Clock::time_point t0) {
  const auto ended_at = Clock::now();
  LossScaler& scaler = w_.scaler();
  if (scaler.enabled()) {
    row.push_back({"loss_scale", double(scaler.scale())});
    row.push_back({"skipped_steps", double(scaler.skipped_in_epoch())});
  }
  if (e_.train.clip.enabled()) row.push_back({"grad_norm", norm_count_ > 0 ? norm_sum_ / double(norm_count_) : NAN});
  Callbacks::EpochEnd ee = cb_.on_epoch_end(epoch, row, lr, epoch + 1 == e_.train.epochs);
  if (ee.snapshot_best) best_weights_ = rep_.download_weights();
  if (ee.restore_best && best_weights_.empty()) {  // resumed from a checkpoint without them (a watchdog snapshot's)
    ee.restore_best = false;
    ee.messages.back() = fmt::format("Not restoring the weights of the best epoch ({}): the checkpoint this run resumed "
                                     "from does not hold them", cb_.best_epoch() + 1);
  }
  // Keras's order: ModelCheckpoint keeps this epoch's weights at its end (best.safetensors), then
  // EarlyStopping's restore at training's end; the run's last checkpoint holds the restored ones.
  TrainState s = state_at(epoch + 1, 0, LossStats{}, stop ? "interrupt" : "epoch");
  const std::string best = obs_ ? obs_->update_best(rep_, s, row) : "";
  if (ee.restore_best) rep_.upload_weights(best_weights_);
  if (obs_) {
    const auto now = Clock::now();
    times_.epoch_end = std::chrono::duration<double>(now - ended_at).count();
    obs_->end_epoch(epoch, console, row, times_.as_metrics(std::chrono::duration<double>(now - t0).count()));
    if (scaler.enabled())
      obs_->line(fmt::format("Loss scale {:g}; {} of {} steps skipped this epoch (inf/NaN gradients), {} in all",
                             scaler.scale(), scaler.skipped_in_epoch(), step, scaler.skipped_total()));
    for (const std::string& m : ee.messages) obs_->line(m);
    if (!best.empty()) obs_->line(best);
    s.callbacks["checkpoint"] = obs_->checkpoint_state();
    if (obs_->due_after_epoch(epoch + 1) || stop || ee.stop || epoch + 1 == e_.train.epochs) save(s);
    if (stop) obs_->line(fmt::format("Interrupted ({}) after epoch {}: checkpoint {}", why(), epoch + 1, obs_->result().checkpoint));
  }
  if (!stop && !ee.stop) return true;
  ended(stop ? "interrupt" : "early_stopping", fmt::format("at the end of epoch {}", epoch + 1));
  return false;
}

TrainState EpochLoop::state_at(int epoch, int64_t step, const LossStats& sum, const char* reason) const {
  TrainState s;
  s.epoch = epoch;
  s.step_in_epoch = step;
  s.global_step = global_step_;
  s.optimizer_steps = rep_.optimizer_steps();
  s.loss_sum = sum.loss_sum;
  s.correct = sum.correct;
  s.count = sum.count;
  s.grad_norm_sum = step > 0 ? norm_sum_ : 0;
  s.grad_norm_count = step > 0 ? norm_count_ : 0;
  s.seed = e_.seed;
  s.replicas = run_.plan.replicas;
  s.global_batch = run_.plan.global_batch;
  s.lr_factor = run_.plan.lr_factor;
  s.config_hash = run_.plan.config_hash;
  s.reason = reason;
  if (obs_) s.last = obs_->result().last;
  s.callbacks = cb_.state();
  if (obs_) s.callbacks["checkpoint"] = obs_->checkpoint_state();
  s.loss_scale = w_.scaler().state();
  return s;
}

void EpochLoop::save(const TrainState& s) {
  Stopwatch t(times_.checkpoint);
  mark_phase(rank_, Phase::Checkpoint);  // a write that never ends is a stall too
  struct Saving {  // cleared on a throw too (a full disk)
    Saving() { interrupt_saving() = true; }
    ~Saving() { interrupt_saving() = false; }
  } saving;
  // restore_best_weights's copy goes into every checkpoint, so that a resumed run can restore it.
  obs_->save(rep_, s, cb_.restores_best() && !best_weights_.empty() ? &best_weights_ : nullptr);
  if (run_.snapshot) {
    std::lock_guard<std::mutex> lock(run_.snapshot->mu);
    run_.snapshot->saved_step = std::max(run_.snapshot->saved_step, s.global_step);
  }
  mark_phase(rank_, Phase::Idle);
}

}  // namespace

void train_epochs(Trainee& w, LoopSetup& run) { EpochLoop(w, run).run(); }

}  // namespace trainer
