// Trainee: one copy of the model as the epoch loop drives it on one thread, with the one training
// step every strategy shares (step.cpp) — a data-parallel replica (ReplicaCopy) or a
// device-parallel model whose stages run on threads of their own (PipelineCopy): R copies × S stages.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/checkpoint/model_state.h"
#include "core/data/loader.h"
#include "core/dist/communicator.h"
#include "core/graph/graph.h"
#include "core/graph/loss.h"
#include "core/graph/model_spec.h"
#include "core/graph/placement.h"
#include "core/ops/context.h"
#include "core/ops/softmax.h"
#include "core/optim/grad_clip.h"
#include "core/optim/loss_scale.h"
#include "core/optim/optimizer.h"
#include "core/optim/weight_average.h"
#include "core/runtime/accumulation.h"
#include "core/runtime/step_parts.h"
#include "core/runtime/step_stats.h"
#include "core/runtime/step_update.h"

namespace trainer {

class Executor;

// What every copy of the model is built from, whatever the strategy: fixed once by the run's plan.
// Binds `o` to the trainable parameters of `ps` (a replica's or a stage's) and tells it their names
// and spans (optimizer.exclude_from_weight_decay).
void bind_optimizer(Optimizer& o, OpContext& ctx, const ParamStore& ps);

struct TraineeSpec {
  ModelSpec model;
  std::shared_ptr<const Graph> graph;  // `model` instantiated once, shared by every replica (data parallel)
  OptimizerSpec optimizer;
  std::string loss = "sparse_categorical_crossentropy";
  LossOptions loss_options;     // train.label_smoothing and train.ignore_class (make_loss)
  ContextOptions context;       // precision, TF32 and workspace; threads are each replica's or stage's own
  uint64_t seed = 42;
  LossScaleOptions loss_scale;
  GradClipOptions clip;         // train.clip_norm / clip_value
  bool sync_bn = false;         // data parallel: batch-norm statistics over the global batch
  int64_t bucket_floats = 0;    // data parallel: gradient bucket size (0: auto)
  Placement placement;          // device parallel: the device of each layer
  int microbatches = 1;         // device parallel: GPipe micro-batches per batch
  bool cuda_graphs = true;      // devices.cuda_graphs: record the step once and replay it (see ReplicaCopy)
  int accumulate = 1;           // train.accumulate: micro-batches per optimizer step
  WeightAverageOptions average; // train.ema: each copy keeps a moving average of its weights

  // The model's graph as this spec's copies run it: zero_pad2d layers folded into the windows that
  // read them where the pad_fold fast path is on (context.fast), except in a pipeline (a folded
  // layer's shape would differ between the whole model and its stage's graph).
  std::shared_ptr<const Graph> make_graph() const {
    return std::make_shared<const Graph>(model, context.fast.has(FastPath::PadFold) && placement.devices.empty());
  }

  ContextOptions context_for(int threads) const {
    ContextOptions o = context;
    o.threads = threads;
    return o;
  }
};

// One micro-batch of an optimizer step (train.accumulate: k): the step's gradients are summed
// over `count` micro-batches and applied once, after the last, with one all-reduce. `scored` is
// the step's scored labels over every rank and micro-batch (Loader::global_scored), the loss
// gradient's divisor, so that k micro-batches of b train as one batch of k·b.
struct MicroStep {
  int index = 0;
  int count = 1;
  int64_t scored = 0;  // 0: the batch's own (scored_labels: a step of one micro-batch)
  bool last() const { return index + 1 == count; }
};

class Trainee {
 public:
  virtual ~Trainee() = default;
  virtual int rank() const = 0;
  // The parameters and optimizer state (checkpoints, restore-best).
  virtual ModelState& state() = 0;
  // Makes every copy start from rank 0's initial parameters.
  virtual void broadcast_parameters() = 0;
  // One step on this rank's batch `b`; returns the step's stats summed over all ranks.
  // `stop`: in, this rank asks to stop after this step; out, some rank asked (all ranks agree).
  // A micro-batch `m` of a step: the earlier ones return zero stats and `stop` false (a stop asked
  // for is kept for the last), which returns the whole step's stats and agreement.
  // The one training step of every strategy (core/runtime/step.cpp): forward and backward (the
  // reduction over the copies starting during backward), the update (StepUpdate), the
  // non-trained parameters and the moving average, the statistics and the stop agreed on.
  // The statistics may still be on their way from the device (a step run as one program: a lone
  // replica's, or several ranks' whose program gathers every rank's loss sums, the stop agreed as
  // the step started): StepStats::get() reads them, a step or more later in the loops
  // (PendingSteps), so that the host never waits for the device within a step.
  // `read_all`, when given: in, this rank needs every launched step read after this one (the
  // watchdog's snapshot of the device's state); out, some rank does — agreed as `stop` is, so that
  // every rank reads (and acts on what it reads) after the same steps.
  StepStats step(const Batch& b, float lr, uint64_t seed, bool& stop, const MicroStep& m, bool* read_all = nullptr);
  // The same step, its statistics waited for (tests; a caller that needs them at once).
  LossStats train_step(const Batch& b, float lr, uint64_t seed, bool& stop, const MicroStep& m) {
    return step(b, lr, seed, stop, m).get();
  }
  LossStats train_step(const Batch& b, float lr, uint64_t seed, bool& stop) { return train_step(b, lr, seed, stop, MicroStep{}); }
  int accumulate() const { return accumulate_; }  // train.accumulate: micro-batches per optimizer step
  int ranks() const { return ctl_ ? ctl_->size() : 1; }  // the copies of the job (data-parallel ranks)
  // Loss and accuracy sums over this rank's shard of a loader pass, summed over all ranks — the
  // one evaluation loop of every strategy. `predictions`, when given, sees each batch with each
  // sample's arg-max class (a confusion matrix).
  using Predictions = std::function<void(const Batch& b, const std::vector<int32_t>& predicted)>;
  // `cut`, when given: the pass stops early once this process is interrupted (a stop signal), and
  // *cut says whether any rank stopped so (all ranks agree; the sums are then incomplete).
  LossStats evaluate(Loader& loader, const Predictions& predictions = {}, bool* cut = nullptr);

  // Loss scaling (train.loss_scale): the scale and the skipped-step counters. Every rank (every
  // stage) decides from the same reduced gradients, so all of them hold the same state.
  LossScaler& scaler() { return update_.scaler(); }
  // Gradient clipping (train.clip_norm / clip_value): the last step's gradient norm before clipping.
  const GradClip& clip() const { return update_.clip(); }
  // Test hook (TRAINER_INJECT_NONFINITE): the next train_step puts an inf into one gradient —
  // data parallel: rank 0's first trainable gradient, before its all-reduce; device parallel:
  // the first stage's that has trainable parameters — as an fp16 overflow in backward would.
  void inject_nonfinite() { inject_ = true; }

  // What the one bench loop (core/runtime/bench_loop.cpp) asks of a trainee:
  // the last train_step's parts, ms (with train.accumulate, that micro-batch's);
  virtual StepBreakdown step_parts() const { return {}; }
  // per-part timing, which synchronises the device at each part's end (free on the CPU, whose
  // ops are synchronous; it stalls a GPU's queue);
  virtual void set_timing(bool) {}
  // the steps whose gradients were summed over the replicas or copies;
  virtual int64_t reduced_steps() const { return 0; }
  // wait for this trainee's devices, then meet every other trainee of the job;
  virtual void settle() {}
  // counters kept across steps (a pipeline's bubble) start again;
  virtual void reset_counters() {}
  virtual bool on_gpu() const { return false; }
  // whether the last step ran as one recorded program (a CUDA graph replayed), not op by op;
  virtual bool step_recorded() const { return false; }
  // the graph whose layers `--layers` times (a replica's), null for none.
  virtual Executor* layers() { return nullptr; }

 protected:
  // The step's parts, as a model copy does them (a replica; a pipeline's stages):
  // what a micro-batch's backward does with the gradients it leaves —
  enum class Grads {
    HoldFirst,  // an earlier micro-batch of the step, its first: they become the held sum (nothing reduced)
    Hold,       // a later earlier one: added to the held sum
    Reduce,     // the step's only micro-batch: reduced over the copies as backward goes
    AddHeld,    // the last of several: the held sum added in, then reduced
  };
  // forward, loss and backward of `b`, the loss gradient times `grad_scale`: this copy's statistics;
  virtual LossStats forward_backward(const Batch& b, uint64_t seed, float grad_scale, Grads g) = 0;
  // a micro-batch as one recorded program where the copy can (a replica on a GPU, alone or over NCCL), the loss
  // gradient divided by the step's scored labels (times `inv_scored`) and multiplied by the loss
  // scale where the program keeps it, its gradients going as `g` says (Reduce: the whole step,
  // update included; AddHeld: the last of several, the held sum added, then the update): true when
  // it ran, `s` its statistics (pending where read later); where it does not run, everything it
  // left unread is followed first, so the host's scale and counts are current;
  virtual bool fixed_step(const Batch&, float /*lr*/, uint64_t /*seed*/, float /*inv_scored*/, Grads /*g*/,
                          StepStats& /*s*/) {
    return false;
  }
  // wait for the reduction and update (update_.apply over the copy's parts, or bucket by bucket);
  virtual void reduce_and_update(float lr) = 0;
  // copy 0's non-trained parameters (batch-norm statistics) to every copy, then the moving average;
  virtual void after_update() = 0;
  // the moving average's start from the weights training starts with (once);
  virtual void start_average() = 0;
  // the step's statistics and stop request summed over every copy (control(): a host all-reduce),
  // asks_.read agreed with them.
  LossStats agree(const LossStats& s, bool& stop);
  // This rank's requests at the step's last micro-batch (false at the earlier ones), which the
  // agreement that settles the step replaces with every rank's: agree(), or, for a step run as one
  // program, the host agreement on how it runs (ReplicaCopy::least_over_ranks).
  struct Asks {
    bool stop = false, read = false;
  } asks_;

  // One batch's forward and loss (no gradient); `predicted`, when given, receives each sample's
  // (or, for per-position labels, each position's) arg-max class. The statistics may be pending
  // (a recorded evaluation program's).
  virtual StepStats eval_batch(const Batch& b, std::vector<int32_t>* predicted) = 0;
  // The pass's sums over every rank (a host all-reduce over control(); one copy: as they are).
  LossStats sum_over_ranks(const LossStats& s);

  // The copies' host collectives (statistics, stop, buffers); null for a lone pipeline.
  Communicator* ctl_ = nullptr;
  StepUpdate update_;  // the optimizer update after the step's gradients are reduced (every strategy's)
  int accumulate_ = 1;  // train.accumulate
  HeldStats held_stats_;  // the step's earlier micro-batches' statistics and stop requests
  bool inject_ = false;
};

}  // namespace trainer
