// PipelineCopy: a device-parallel model as one copy the one training step (core/runtime/step.cpp)
// drives — its stages (one per device, each on a thread of its own and a part of the update), the
// boundaries between them, the GPipe micro-batch schedule, the sum of a shared layer's gradients
// over the devices holding copies, hybrid's sums over the copies, and the time stages sat idle.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/dist/communicator.h"
#include "core/runtime/accumulation.h"
#include "core/runtime/batch_inputs.h"
#include "core/runtime/devices.h"
#include "core/runtime/device_parallel/mailbox.h"
#include "core/runtime/device_parallel/stage.h"
#include "core/runtime/device_parallel/stage_threads.h"
#include "core/runtime/trainee.h"

namespace trainer {

// The devices a placement's labels run on: cpu -> cpu:0, cpu:N -> a virtual CPU device N;
// gpu:N -> the N-th GPU of devices.gpus (--gpus) when GPUs are requested, else a virtual CPU
// device of its own (so a GPU placement runs, slowly, on any machine). `notes` says what ran where.
std::vector<Device> placement_devices(const Placement& p, const DevicesSpec& r, std::vector<std::string>* notes);

class PipelineCopy final : public Trainee {
 public:
  PipelineCopy(const TraineeSpec& t, const std::vector<Device>& devices, int threads);
  ~PipelineCopy() override;

  int rank() const override { return rank_; }
  ModelState& state() override { return *state_; }
  // Copies of a shared layer start equal (same seed and name); replicas of a hybrid run take
  // replica 0's parameters, stage by stage.
  void broadcast_parameters() override;

  // Hybrid (data parallel over copies of this pipeline): this copy is data-parallel rank `rank`;
  // `stage_comms[s]` joins stage s of every copy (gradients all-reduced after the schedule,
  // parameters broadcast; with sync_bn, each micro-batch's batch-norm statistics over the copies'
  // same micro-batch), `ctl` the copies' driving threads (the step's statistics, the stop).
  void attach(int rank, std::vector<Communicator*> stage_comms, Communicator* ctl);

  // Forward and backward only (no update): the gradients stay in each stage's store, a shared
  // layer's summed over its copies. For tests and benchmarks. `loss_scale` multiplies the loss
  // gradient (loss scaling).
  LossStats compute_gradients(const Batch& b, uint64_t seed, float loss_scale = 1.0f);
  int stages() const { return int(stages_.size()); }
  StageRuntime& stage(int s) { return *stages_[size_t(s)]; }
  int microbatches() const { return microbatches_; }
  // Steps whose gradients were summed over the copies (hybrid: one per optimizer step).
  int64_t reduced_steps() const override { return reduced_steps_; }

  // Idle time: 1 - (stage busy seconds) / (stages x wall seconds), over the training steps
  // since the last reset (busy = a stage's time in its part of the schedule minus its waits).
  struct Bubble {
    double wall = 0, busy = 0;
    int stages = 0;
    int64_t steps = 0;
    double fraction() const { return wall > 0 ? 1.0 - busy / (wall * stages) : 0.0; }
  };
  const Bubble& bubble() const { return bubble_; }
  void reset_bubble() { bubble_ = Bubble{0, 0, int(stages_.size()), 0}; }
  void reset_counters() override { reset_bubble(); }

  // Where the last train_step's time went, in seconds. Forward and backward interleave across
  // stages (and a stage's graphs per micro-batch are its own), so the schedule is one part: every
  // stage's forward, loss and backward of every micro-batch, as wall time from the first stage's
  // start to the last one's end. A stage's busy time is its part of that less its waits for
  // other stages (activations, gradients). With timing on (for `trainer bench`), each stage's
  // device is synchronised after its update, so asynchronous GPU work is counted where launched.
  struct StageTime {
    double busy = 0, waited = 0, optimizer = 0;
    double forward = 0;  // the part of busy spent in forwards (the loss included); the rest is backward
  };
  struct StepTimes {
    double schedule = 0;    // the GPipe schedule (forward + backward; hybrid: each stage's sum after it), wall time
    double shared_sum = 0;  // a shared layer's gradients summed over the devices holding copies
    double allreduce = 0;   // hybrid: the longest stage's sum over the copies (after its backward, in the schedule's time)
    double optimizer = 0;   // every stage's update (in parallel), wall time
    std::vector<StageTime> stages;
  };
  const StepTimes& step_times() const { return times_; }
  // The schedule as one part (forward and backward interleave across stages), the update, the
  // sums (a shared layer's over its devices, exposed; hybrid: each stage's over the copies,
  // after its backward) and each stage's share.
  StepBreakdown step_parts() const override;
  void set_timing(bool on) override { timing_ = on; }
  void settle() override;  // every stage's device, then (hybrid) a barrier of the copies
  bool on_gpu() const override;
  // Whether the last training step ran as every stage's recording replayed (CUDA graphs).
  bool step_recorded() const override { return replayed_; }
  // Tests: run the step as the stages' programs (as called) on any device, CPU stages included.
  void set_fixed_anywhere(bool on) { fixed_anywhere_ = on; }
  int64_t program_steps() const { return program_steps_; }  // micro-batches run as programs
  // How often the boundaries' buffers were made (again): once, and once more per larger micro-batch.
  uint64_t boundary_generation() const { return generation_; }

 protected:
  LossStats forward_backward(const Batch& b, uint64_t seed, float grad_scale, Grads g) override;
  // The step as every stage's fixed program (pipeline_program.cpp) where program_ok().
  bool fixed_step(const Batch& b, float lr, uint64_t seed, float inv_scored, Grads g, StepStats& s) override;
  void reduce_and_update(float lr) override;
  void after_update() override;
  void start_average() override;
  StepStats eval_batch(const Batch& b, std::vector<int32_t>* predicted) override;

 private:
  // Forward (and backward when training) of `b` through the schedule; `grad_scale` multiplies
  // the loss gradient (1 / the step's samples, times the loss scale).
  LossStats pass(const Batch& b, bool training, int microbatches, uint64_t seed, float grad_scale = 0.0f);
  // `b` cut into (at most) M micro-batches, the boundaries' buffers sized for them and the mailbox
  // cleared: a pass's or a program's start.
  std::vector<MicroBatch> micro_batches(const Batch& b, int M);
  // The boundaries' buffers for micro-batches [lo[m], lo[m+1]): views of memory that grows and is
  // kept (a short batch's or evaluation's micro-batch views its front), made again only where a
  // micro-batch outgrows it (generation_ moves, and the programs that copy into them record again).
  void size_boundaries(const std::vector<int64_t>& lo);
  void sum_shared_gradients();
  // inject_nonfinite(): an inf in the first gradient of the first stage that has trainable
  // parameters (-1: none), set on that stage's thread.
  int poison_stage() const;
  void poison(int stage);

  // Whether this step can run as the stages' fixed programs: devices.cuda_graphs, every stage on a
  // device that records (or fixed_anywhere_), every boundary direct, hybrid's communicators
  // recordable where the stages record, no clipping with a layer shared across stages (the norm —
  // clip_norm's, and the one clip_value reports — counts the layer once: StepUpdate's
  // counted_elsewhere, which the stages' measures do not know), no test hook or timing, at most as
  // many micro-batches as one read-back holds.
  bool program_ok() const;
  // Per stage, its part in summing the shared layers' copies inside the programs.
  std::vector<std::vector<StageTie>> stage_ties();
  bool cuda_graphs_ = true;
  bool fixed_anywhere_ = false;
  bool replayed_ = false;
  int64_t program_steps_ = 0;
  uint64_t generation_ = 0;  // the boundaries' buffers' (size_boundaries)
  int microbatches_ = 1;
  bool hold_ = false, hold_first_ = false, add_ = false;  // see held_grads_
  int64_t reduced_steps_ = 0;
  std::vector<UpdatePart> update_parts_;  // each stage's optimizer, for the step's update
  int rank_ = 0;
  std::vector<Communicator*> stage_comms_;  // hybrid: per stage, across the copies (empty: one copy)
  bool sync_bn_ = false;
  std::vector<std::unique_ptr<StatsSync>> syncs_;  // hybrid with sync_bn: per stage
  Mailbox box_;
  std::vector<std::unique_ptr<StageRuntime>> stages_;
  // Accumulation: per stage, the step's earlier micro-batches' gradient sum; hold_: this pass's
  // gradients go into it (hold_first_: replace it); add_: it goes into this pass's gradients.
  // Declared after stages_ so that it goes first: its tensors live in the stages' contexts (a GPU
  // stage's allocator dies with its context: the other order crashed on two GPU stages, 2026-11-30).
  std::vector<std::unique_ptr<GradAccumulator>> held_grads_;
  // Programs deciding the update (pipeline_program.cpp): per stage, every stage's measure, in its
  // memory; their mailbox slots and marks follow the boundaries' hand-offs.
  std::vector<Tensor> checks_;  // after stages_, as held_grads_: it lives in their memory
  size_t check_slots() const { return bounds_.size() * size_t(microbatches_) * 2; }
  // A shared layer's copies in programs: per group, per holder, per copy, a buffer in the holder's
  // memory (after stages_, as checks_); their mailbox slots and marks follow the checks'.
  std::vector<std::vector<std::vector<Tensor>>> tied_gathered_;
  size_t tie_slots() const { return check_slots() + stages_.size(); }
  size_t slot_count() const;
  std::vector<Boundary> bounds_;
  std::unique_ptr<StageThreads> threads_;
  std::vector<std::unique_ptr<ModelState>> stage_states_;
  std::unique_ptr<ModelState> state_;
  std::vector<Shape> input_shapes_;
  BatchInputs batch_inputs_;
  // Parameters held by several stages: per group, (stage, entry index) of each copy.
  std::vector<std::vector<std::pair<int, size_t>>> tied_;
  Bubble bubble_;
  bool timing_ = false;
  StepTimes times_;
};

}  // namespace trainer
