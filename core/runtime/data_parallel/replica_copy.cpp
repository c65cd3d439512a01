// The data-parallel step of one replica.
#include "core/runtime/data_parallel/replica_copy.h"

#include "core/runtime/comm_stats.h"
#include "core/runtime/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

namespace trainer {
namespace {

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point z) {
  return std::chrono::duration<double>(z - a).count();
}

}  // namespace

ReplicaCopy::~ReplicaCopy() = default;

ReplicaCopy::ReplicaCopy(const TraineeSpec& t, int rank, Device device, int threads)
    : rank_(rank), sync_bn_(t.sync_bn), cuda_graphs_(t.cuda_graphs), bucket_floats_(t.bucket_floats) {
  accumulate_ = t.accumulate;
  rep_ = std::make_unique<Replica>(t, device, threads);
  if (accumulate_ > 1) held_grads_ = std::make_unique<GradAccumulator>(rep_->context(), rep_->executor().params().trainable_floats());
  update_ = StepUpdate(t.loss_scale, t.clip);
  update_parts_ = {UpdatePart{&rep_->optimizer(), {}}};
  // Test hook: TRAINER_TEST_FIXED_STEP=1 runs the fixed program on the CPU too (a whole run's
  // statistics then come back through read_back, as a GPU's do); =buckets, with its gradient
  // summed bucket by bucket during backward (as NCCL's is).
  if (const char* v = std::getenv("TRAINER_TEST_FIXED_STEP")) {
    fixed_anywhere_ = std::string(v) == "1" || std::string(v) == "buckets";
    program_buckets_ = std::string(v) == "buckets";
  }
}

void ReplicaCopy::poison_first_gradient() {
  Tensor g = rep_->executor().params().trainable_grads();
  if (g.numel() == 0) return;
  const float inf = std::numeric_limits<float>::infinity();
  rep_->context().copy_from_host(g.data(), &inf, sizeof(float));
}

void ReplicaCopy::attach(Communicator& grad, Communicator& ctl, Communicator& host) {
  ctl_ = &ctl;
  grad_ = &grad;
  host_ = &host;
  ParamStore& ps = rep_->executor().params();
  std::vector<int64_t> cuts;
  for (const ParamEntry& p : ps.entries())
    if (p.spec.trainable) cuts.push_back(p.offset);
  buckets_ = std::make_unique<GradBuckets>(ps.trainable_grads(), cuts, bucket_floats_, grad, rep_->context());
  // sync_bn with a communication thread (GPU memory): no bucket is handed over before backward has
  // ended, so that every batch norm's statistics collective (this thread's, on the control
  // communicator) is queued on the replica's stream before any gradient collective (the
  // communication thread's). Two threads issuing to one stream meanwhile could queue them in
  // another order on another rank, and the GPUs would pair different collectives: a hang (NCCL:
  // communicators used at once must be ordered alike on every rank). The sums then follow backward.
  const bool statistics_first = sync_bn_ && buckets_->threaded();
  rep_->executor().set_backward_hook([this, statistics_first](int64_t frontier) {
    // Every gradient is final at frontier 0; the bucket holding offset 0 is reduced after this.
    if (frontier == 0 && inject_ && rank_ == 0) poison_first_gradient();
    if (hold_) return;  // an earlier micro-batch of the step: nothing is reduced
    if (statistics_first && frontier > 0) return;
    if (add_ && frontier < added_to_) {
      held_grads_->add_into(rep_->executor().params().trainable_grads(), frontier, added_to_);
      added_to_ = frontier;
    }
    buckets_->on_frontier(frontier);
  });
  // The end of forward, for StepTimes (the loss is computed right after the logits).
  GraphHooks h;
  h.after_forward = [this](int node) {
    if (node != rep_->logits_node()) return;
    if (timing_) rep_->context().synchronize();
    forward_end_ = Clock::now();
    mark_phase(rank_, Phase::Backward);
  };
  // Between layers of backward, the worker thread sums the gradient pieces every rank has posted.
  h.after_backward = [this](int) {
    if (!hold_) buckets_->progress();
  };
  rep_->executor().set_hooks(std::move(h));
  if (sync_bn_) {  // batch-norm statistics over every replica through the control communicator
    sync_ = std::make_unique<CommStats>(ctl);
    Executor& ex = rep_->executor();
    for (size_t i = 0; i < ex.nodes().size(); ++i) ex.layer(int(i)).set_sync(sync_.get());
  }
}

void ReplicaCopy::broadcast_parameters() {
  Tensor w = rep_->executor().params().weights();
  ctl_->broadcast(w, 0);
}

// A step that can be one fixed, recorded program: on a context that can capture, this replica
// alone in the job or with communicators whose collectives a capture records (NCCL: one GPU per
// replica; the in-process one of one GPU listed N times, `--gpus 0,0`, in pieces between its
// rendezvous; not MPI's between processes) — synchronised batch norm's too (its statistics summed
// on the control communicator, in the layers) — without test hooks, per-part timing or per-layer
// profiling (both synchronise the device between parts). Loss scaling and
// clipping are kernels of the program (StepUpdate::rule). Every other step takes the ordinary
// path. (Tests: fixed_anywhere_ runs the program as called on the CPU, any number of replicas.)
// With several ranks every condition must hold on all of them alike — the program's collectives
// meet only the other ranks' programs: the configuration's are, and `trainer bench --layers`,
// which profiles rank 0 only, turns timing on everywhere.
bool ReplicaCopy::fixed_step_ok() const {
  const bool records = grad_->records() && (!sync_bn_ || ctl_->records());
  const bool program = rep_->context().can_capture() ? ctl_->size() == 1 || records : fixed_anywhere_;
  return cuda_graphs_ && program && !inject_ && !timing_ && !rep_->executor().profiling();
}

// The least of every rank's `v` (FixedPeers::least): one host all-reduce of a one-hot count, with
// the step's asks (Trainee::asks_: stop, read every step) agreed in the same exchange, on the
// host communicator (NCCL's host all-reduce would wait behind the device's queued work).
int ReplicaCopy::least_over_ranks(int v) {
  constexpr int kValues = 4;  // Replica::fixed_step's modes; 0/1 for its recordings' success
  if (v < 0 || v >= kValues) throw std::logic_error(fmt::format("least_over_ranks: {} out of 0..{}", v, kValues - 1));
  std::vector<double> seen(kValues + 2, 0.0);
  seen[size_t(v)] = 1;
  seen[kValues] = asks_.stop ? 1 : 0;
  seen[kValues + 1] = asks_.read ? 1 : 0;
  mark_phase(rank_, Phase::Agreement);
  try {
    host_->all_reduce_host(seen);
  } catch (const CommError&) {
    // Another rank failed: the collectives this rank queued that it will not join end too (NCCL: this
    // rank's communicator aborted; the group is flagged before the host agreement is).
    try {
      grad_->check_abort();
    } catch (const CommError&) {
    }
    throw;
  }
  mark_phase(rank_, Phase::Forward);  // the step goes on
  asks_.stop = seen[kValues] > 0;
  asks_.read = seen[kValues + 1] > 0;
  for (int i = 0; i < kValues; ++i)
    if (seen[size_t(i)] > 0) return i;
  throw std::logic_error("least_over_ranks: no rank's value");
}

bool ReplicaCopy::fixed_step(const Batch& b, float lr, uint64_t seed, float inv_scored, Grads g, StepStats& s) {
  recorded_ = fixed_ = false;
  if (!fixed_step_ok()) {
    rep_->follow_all();  // the ordinary step reads and changes the host's scale and counts
    held_stats_.stats += rep_->take_held_sums();  // earlier micro-batches of this step run as programs
    return false;
  }
  fixed_ = true;
  FixedMicro micro;
  micro.held = held_grads_.get();
  micro.kind = g == Grads::HoldFirst ? FixedMicro::HoldFirst
               : g == Grads::Hold    ? FixedMicro::Hold
               : g == Grads::AddHeld ? FixedMicro::AddHeld
                                     : FixedMicro::Whole;
  // One rank: the backward hook only marks buckets done (an earlier micro-batch's: not even that).
  // Several, or one with a recording communicator (a one-rank NCCL check): the program sums the
  // whole gradient itself, so the buckets stay out of it; with several the ranks agree on how
  // each step runs (Replica::fixed_step).
  const bool alone = ctl_->size() == 1 && !grad_->records();
  hold_ = !micro.updates() || !alone;
  if (!hold_) buckets_->start_step();
  FixedPeers peers;
  if (!alone) peers.comm = program_comm_ ? program_comm_ : grad_;
  // The gradient summed bucket by bucket beside backward where the communicator overlaps (NCCL),
  // unless another communicator's collectives run in backward (sync_bn's statistics on the control
  // communicator: NCCL's communicators must not run at once); on the CPU where a test asks.
  if (!alone && !sync_bn_ && (peers.comm->overlaps() || program_buckets_)) peers.buckets = &buckets_->buckets();
  if (ctl_->size() > 1) peers.least = [this](int v) { return least_over_ranks(v); };
  peers.waiting = [this] { mark_phase(rank_, Phase::AllReduce, 1, 1); };  // the whole gradient: one bucket
  // The statistics may be read a step or more later: alone; with several ranks, where the program
  // gathers every rank's sums and no earlier micro-batch of the step ran the ordinary way (its sums
  // are this rank's alone, for the host exchange of Trainee::agree).
  const bool ordinary_before = held_stats_.stats.count != 0 || held_stats_.stats.loss_sum != 0;
  const bool defer = ctl_->size() == 1 || !ordinary_before;
  try {
    s = rep_->fixed_step(b.images, b.labels, lr, inv_scored, seed, true, &update_, micro, peers, defer);
  } catch (...) {
    hold_ = false;
    throw;
  }
  hold_ = false;
  recorded_ = rep_->replayed();
  times_ = StepTimes{};  // one program: no parts (bench times it with timing on, the ordinary path)
  if (!micro.updates()) return true;
  ++reduced_steps_;
  return true;
}

void ReplicaCopy::start_average() {
  if (WeightAverage* avg = rep_->average()) avg->start();
}

// Held micro-batches sum into held_ after backward (no bucket is reduced); the last of several
// adds held_ into each bucket's range just before its all-reduce (the backward hook, add_).
LossStats ReplicaCopy::forward_backward(const Batch& b, uint64_t seed, float grad_scale, Grads g) {
  recorded_ = fixed_ = false;
  const bool hold = g == Grads::Hold || g == Grads::HoldFirst;
  start_ = Clock::now();
  forward_end_ = start_;
  if (!hold) buckets_->start_step();
  hold_ = hold;
  add_ = g == Grads::AddHeld;
  added_to_ = rep_->executor().params().trainable_floats();
  LossStats s;
  try {
    s = rep_->compute_gradients(b.images, b.labels, grad_scale, seed);
  } catch (...) {
    hold_ = add_ = false;
    throw;
  }
  hold_ = false;
  inject_ = false;
  if (add_ && added_to_ > 0) throw std::logic_error("accumulation: backward ended before offset 0");
  add_ = false;
  if (hold) held_grads_->hold(rep_->executor().params().trainable_grads(), g == Grads::HoldFirst);
  else ++reduced_steps_;
  if (timing_) rep_->context().synchronize();
  backward_end_ = Clock::now();
  if (hold) {  // no update in this part of the step
    times_ = StepTimes{};
    times_.forward = seconds(start_, forward_end_);
    times_.backward = seconds(forward_end_, backward_end_);
  }
  return s;
}

// The update as the buckets' all-reduces finish: each bucket's as it arrives when nothing needs
// the whole gradient; otherwise after the last, through StepUpdate.
void ReplicaCopy::reduce_and_update(float lr) {
  Optimizer& opt = rep_->optimizer();
  const auto& bk = buckets_->buckets();
  const int n = int(bk.size());
  if (!update_.whole_gradient()) {
    opt.begin_step();
    for (size_t i = bk.size(); i-- > 0;) {  // in the order their all-reduces finish
      mark_phase(rank_, Phase::AllReduce, n - int(i), n);
      buckets_->wait(i);
      mark_phase(rank_, Phase::Optimizer);
      opt.update(bk[i].begin, bk[i].end, lr, 1.0f);
    }
  } else {
    // The check and the norm need every reduced gradient: the update waits for the last all-reduce.
    for (size_t i = bk.size(); i-- > 0;) {
      mark_phase(rank_, Phase::AllReduce, n - int(i), n);
      buckets_->wait(i);
    }
    mark_phase(rank_, Phase::Optimizer);
    update_.apply(update_parts_, [](const std::function<void(int)>& fn) { fn(0); }, lr);  // one part, this thread
  }
  if (timing_) rep_->context().synchronize();
  const Clock::time_point updated = Clock::now();
  // Every bucket has been waited for: the communication thread's counts are final.
  times_.forward = seconds(start_, forward_end_);
  times_.backward = seconds(forward_end_, backward_end_);
  times_.exposed = buckets_->exposed_seconds();
  times_.skew = buckets_->skew_seconds();
  times_.optimizer = std::max(0.0, seconds(backward_end_, updated) - times_.exposed - times_.skew);
  times_.allreduce = buckets_->reduce_seconds();
  if (timing_) {
    timeline_.forward_end = seconds(start_, forward_end_);
    timeline_.backward_end = seconds(start_, backward_end_);
    timeline_.update_end = seconds(start_, updated);
    timeline_.reduced_by = buckets_->reduced_by();
    timeline_.buckets = bk;
    timeline_.trace = buckets_->trace();
  }
}

void ReplicaCopy::after_update() {
  mark_phase(rank_, Phase::StepEnd);
  Tensor frozen = rep_->executor().params().frozen_weights();
  if (frozen.numel() > 0) ctl_->broadcast(frozen, 0);
  // After rank 0's statistics reached every replica: the same average everywhere.
  if (WeightAverage* avg = rep_->average()) avg->update(rep_->optimizer().steps());
}

StepBreakdown ReplicaCopy::step_parts() const {
  StepBreakdown p;
  p.forward_ms = 1e3 * times_.forward;
  p.backward_ms = 1e3 * times_.backward;
  p.forward_backward_ms = p.forward_ms + p.backward_ms;
  p.optimizer_ms = 1e3 * times_.optimizer;
  p.allreduce_ms = 1e3 * times_.allreduce;
  p.exposed_allreduce_ms = 1e3 * times_.exposed;
  p.skew_ms = 1e3 * times_.skew;
  return p;
}

void ReplicaCopy::settle() {
  rep_->context().drain();
  ctl_->barrier();
}

// A validation batch as a recorded program where a step can be one (without predictions to read
// back; batch norm uses its running statistics there, synchronised or not: no collective).
StepStats ReplicaCopy::eval_batch(const Batch& b, std::vector<int32_t>* predicted) {
  const bool program = rep_->context().can_capture() || fixed_anywhere_;
  if (!predicted && cuda_graphs_ && program && !rep_->executor().profiling())
    return rep_->fixed_eval(b.images, b.labels, true);
  return rep_->eval_step(b.images, b.labels, predicted);
}

}  // namespace trainer
