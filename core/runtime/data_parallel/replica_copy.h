// ReplicaCopy: one data-parallel replica as the one training step (core/runtime/step.cpp) drives
// it — forward, loss and backward with the bucketed all-reduce overlapping it, the optimizer per
// bucket or through StepUpdate, the step as one recorded program where it can — evaluation of its
// shard, and the per-step synchronisation that keeps every replica identical.
//
// Per training step every rank meets the others at, in order:
//   1. one all-reduce per gradient bucket while backward continues (summed by the worker threads
//      between layers on the CPU, on a communication thread for GPU memory);
//      with loss scaling, the update then waits for all of them and checks them for inf/NaN;
//   2. a broadcast of rank 0's non-trained parameters (batch-norm running statistics);
//   3. a host all-reduce of the step's loss sum, correct count and sample count.
// (With sync_bn, each batch-norm layer adds two device all-reduces in forward and one in backward.)
// With train.accumulate k, the first k-1 micro-batches meet nobody: their gradients are summed
// into a buffer of the replica's own, which the last micro-batch's backward adds into each bucket
// just before that bucket's all-reduce.
// As one recorded program (NCCL, one GPU per replica; the CPU in tests), every rank meets the
// others at: the host agreement on how the step runs and on the stop (Replica::fixed_step; on the
// host, not behind the device's work), the all-reduces of 1. inside the program (NCCL: on a stream
// of their own beside backward, joined before the update; without sync_bn) or one all-reduce of
// the whole gradient after backward (one GPU listed N times, sync_bn), the broadcast of 2. and an
// all-gather of every rank's loss sums, all inside the program, whose statistics are then read a
// step or more later as a lone replica's are (3. is not needed).
#pragma once
#include <chrono>
#include <memory>

#include "core/data/loader.h"
#include "core/ops/elementwise.h"
#include "core/runtime/accumulation.h"
#include "core/runtime/data_parallel/grad_buckets.h"
#include "core/runtime/data_parallel/replica.h"
#include "core/runtime/bench_result.h"
#include "core/runtime/trainee.h"

namespace trainer {

// Where one train_step's time went, in seconds, as this rank saw it. Four steady_clock reads a
// step (the end of forward is marked from the graph's after_forward hook). A GPU runs ahead of
// the host, so without timing each part is only its launch time; with ReplicaCopy::set_timing(true) the
// device is synchronised at each boundary and each part holds its device work (CPU ops are
// synchronous: the times are exact either way). Whatever is not here (the step-end statistics
// broadcast and loss all-reduce, the caller's own loop) is the rest of the step's wall time.
struct StepTimes {
  double forward = 0;    // the batch to the device and forward up to the logits
  double backward = 0;   // the loss and backward (the buckets' all-reduces start meanwhile)
  double optimizer = 0;  // the per-bucket updates, less the time spent waiting for all-reduces
  double allreduce = 0;  // all-reduce time (GradBuckets::reduce_seconds), mostly overlapping backward
  double exposed = 0;    // the part of it the updates waited for after backward (not hidden)
  double skew = 0;       // the updates waited for another replica's backward to reach a bucket
  StepTimes& operator+=(const StepTimes& o) {
    forward += o.forward, backward += o.backward, optimizer += o.optimizer;
    allreduce += o.allreduce, exposed += o.exposed, skew += o.skew;
    return *this;
  }
};

class ReplicaCopy final : public Trainee {
 public:
  ReplicaCopy(const TraineeSpec& t, int rank, Device device, int threads);
  ~ReplicaCopy() override;
  // Connects the worker to its communicators (made once every replica's context exists):
  // `grad` is used only by the gradient communication thread, `ctl` and `host` (host agreements
  // that must not wait for the device: make_host_communicators) only by the worker thread.
  void attach(Communicator& grad, Communicator& ctl, Communicator& host);

  int rank() const override { return rank_; }
  ModelState& state() override { return rep_->state(); }
  Replica& replica() { return *rep_; }
  Communicator& control() { return *ctl_; }
  // Binds this thread to the replica's device (call first on the worker thread).
  void bind_thread() { rep_->context().bind_thread(); }
  // Makes every replica start from rank 0's initial parameters.
  void broadcast_parameters() override;

  // Steps whose gradients were all-reduced (one per optimizer step, whatever train.accumulate is).
  int64_t reduced_steps() const override { return reduced_steps_; }

  const GradBuckets& buckets() const { return *buckets_; }
  // The last train_step's parts; `timing` synchronises the device between them (for `trainer
  // bench`: it costs a GPU the overlap of host and device across those points).
  const StepTimes& step_times() const { return times_; }
  StepBreakdown step_parts() const override;
  // The last train_step's timeline, recorded while timing is on.
  const StepTimeline& timeline() const { return timeline_; }
  void set_timing(bool on) override { timing_ = on; }
  void settle() override;  // the device's queue, then a barrier of every replica
  bool on_gpu() const override { return !rep_->context().device().is_cpu(); }
  Executor* layers() override { return &rep_->executor(); }
  bool step_recorded() const override { return recorded_; }
  // Tests: the fixed program (fixed_step) also where nothing can be recorded — the CPU then runs
  // it as called — so that its arithmetic is compared with the ordinary step's on any machine.
  void set_fixed_anywhere(bool on) { fixed_anywhere_ = on; }
  // Tests: several ranks' program sums its gradient bucket by bucket during backward (as over NCCL,
  // whose collectives overlap backward) where the communicator runs them as called.
  void set_program_buckets(bool on) { program_buckets_ = on; }
  // Tests: the communicator the fixed program sums the gradient on and issues its collectives to
  // (null: the gradients' own), e.g. one whose started sums run only when joined, the latest an
  // overlapping communicator may run them.
  void set_program_comm(Communicator* c) { program_comm_ = c; }
  // Whether the last step ran as the fixed program (recorded or not).
  bool last_step_fixed() const { return fixed_; }

 protected:
  LossStats forward_backward(const Batch& b, uint64_t seed, float grad_scale, Grads g) override;
  bool fixed_step(const Batch& b, float lr, uint64_t seed, float inv_scored, Grads g, StepStats& s) override;
  void reduce_and_update(float lr) override;
  void after_update() override;
  void start_average() override;
  StepStats eval_batch(const Batch& b, std::vector<int32_t>* predicted) override;

 private:
  using Clock = std::chrono::steady_clock;
  void poison_first_gradient();  // inject_nonfinite(): an inf in the first trainable gradient

  int rank_;
  bool fixed_step_ok() const;
  int least_over_ranks(int v);
  Communicator* grad_ = nullptr;  // the gradients' communicator (attach)
  Communicator* host_ = nullptr;  // the host agreements' (attach)
  bool sync_bn_;
  bool cuda_graphs_;
  int64_t bucket_floats_;
  std::unique_ptr<Replica> rep_;
  std::unique_ptr<GradBuckets> buckets_;
  std::unique_ptr<StatsSync> sync_;  // sync_bn
  bool timing_ = false;
  StepTimes times_;
  StepTimeline timeline_;
  Clock::time_point start_, backward_end_;  // this step's
  Clock::time_point forward_end_;           // set by the after_forward hook at the logits
  // Accumulation (train.accumulate > 1): the sum of the step's earlier micro-batches' gradients;
  // hold_: this backward's gradients are kept (no all-reduce); add_: the last micro-batch's
  // backward adds held_grads_ into each range before it is reduced, down to offset added_to_.
  std::unique_ptr<GradAccumulator> held_grads_;
  bool hold_ = false, add_ = false;
  int64_t added_to_ = 0;
  int64_t reduced_steps_ = 0;
  std::vector<UpdatePart> update_parts_;  // the replica's optimizer, the step's one part (made once)
  bool recorded_ = false;  // the last step replayed its recording
  bool fixed_anywhere_ = false;
  bool program_buckets_ = false;
  Communicator* program_comm_ = nullptr;
  bool fixed_ = false;  // the last step ran as the fixed program
};

}  // namespace trainer
