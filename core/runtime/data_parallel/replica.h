// Replica: one device's copy of the model — its context, graph, parameters and optimizer —
// and the training/evaluation step on a batch.
#pragma once
#include <deque>
#include <functional>
#include <map>
#include <memory>

#include "core/runtime/batch_inputs.h"
#include "core/runtime/recorded_step.h"
#include "core/runtime/step_stats.h"
#include "core/runtime/trainee.h"
#include "core/graph/loss.h"
#include "core/checkpoint/model_state.h"
#include "core/graph/executor.h"
#include "core/optim/optimizer.h"

namespace trainer {

// A micro-batch of an accumulated step (train.accumulate) in the fixed program, with the held sum
// of the step's earlier ones: Whole, a step of one micro-batch; HoldFirst and Hold, an earlier one
// whose gradients start or join the held sum (no update); AddHeld, the last, the held sum added to
// its gradients before the update. Each kind is a recording of its own per batch size.
struct FixedMicro {
  enum Kind { Whole, HoldFirst, Hold, AddHeld } kind = Whole;
  GradAccumulator* held = nullptr;  // for every kind but Whole
  bool updates() const { return kind == Whole || kind == AddHeld; }
};

// The other replicas of a fixed program (several ranks): `comm` sums the gradients (the whole
// flat buffer, after backward) and broadcasts rank 0's non-trained parameters inside the program;
// `least` returns the least of every rank's value (a host collective), through which the ranks
// agree on how each step runs — launched, recorded or replayed — since a collective recorded on one
// rank must be recorded on all (NCCL's rule), and on whether every recording succeeded.
struct FixedPeers {
  Communicator* comm = nullptr;  // null: one replica
  std::function<int(int)> least;
  std::function<void()> waiting;  // called before the program's collectives and the wait for them (the watchdog's phase)
  // The gradient's buckets (ascending offsets, GradBuckets'): each one's sum started as backward
  // finishes it (Communicator::start_all_reduce_sum, beside the rest of backward where the
  // communicator overlaps), all joined before the update. Null: the whole gradient summed after
  // backward. Elementwise sums either way: the same bits where the communicator's sum of a range
  // does not depend on the range's size (the in-process and MPI ones; NCCL picks its algorithm by
  // size, as the ordinary step's buckets do).
  const std::vector<BucketRange>* buckets = nullptr;
};

class Replica : public StepFollower {
 public:
  Replica(const TraineeSpec& t, Device device, int threads);

  // forward, fused softmax cross-entropy, backward and the optimizer update on this replica's
  // whole batch (host labels); returns the batch's loss sum and correct count. The loss gradient
  // is divided by the labels scored (every one but those of train.ignore_class).
  LossStats train_step(const Tensor& images, const Tensor& labels, float lr, uint64_t step_seed);
  // `predicted`, when given, receives each sample's (or each position's) arg-max class.
  LossStats eval_step(const Tensor& images, const Tensor& labels, std::vector<int32_t>* predicted = nullptr);
  // Inference: forward to the loss's logits node; its values [N, units] copied into `host` (or only
  // `count` of them from the `first`: one position's scores of a language model).
  void logits(const Tensor& images, std::vector<float>& host, int64_t first = 0, int64_t count = -1);
  // Only forward + loss + backward (no update): the gradient is left in params().grads().
  LossStats compute_gradients(const Tensor& images, const Tensor& labels, float grad_scale, uint64_t step_seed);

  // The whole step as a fixed program (fixed_step.cpp): the batch and the host's values of this
  // step (rate, 1/scored labels `inv_scored`, the seed, Adam's corrections: StepScalars) copied
  // into buffers of fixed address, then forward, the loss (its statistics added up in memory),
  // backward and the optimizer update over the whole flat buffer. What the update changes for the
  // next step — the loss scale, its growth count, the optimizer's count — is kept where the program
  // runs (StepState): the program derives its loss and gradient factors, corrections and the moving
  // average's cadence from it (begin_fixed) and advances it (end_fixed), so no step needs the one
  // before it read back. On a context that can capture (CUDA) and with `record` on, that work is
  // recorded on a batch size's second step (the first plans, picks algorithms and grows scratch)
  // and replayed from the third; elsewhere it runs as called. The same arithmetic on the same
  // values as train_step(…, lr, seed) with grad_scale = inv_scored: the same bits. With `update`
  // (loss scaling, clipping), the finite check, the norm, the skip and the clip are kernels of the
  // program too (StepUpdate::rule), and the host's scaler, norm and optimizer count follow what
  // they found when the step is read (follow_through; a skipped step leaves the count as it was):
  // the bits of compute_gradients and update->apply. `micro`: a micro-batch of an accumulated step
  // (the held sum kept or added back as the ordinary path does; the update only on the last).
  // `peers`: the other replicas (the gradient summed and the statistics broadcast inside the
  // program). Returns the loss statistics of the step's micro-batches so far, this replica's own
  // (an earlier micro-batch: zero, its sums kept for the last's): read once its work is done, or
  // with `defer` (one replica) pending (StepStats), read back behind it for the loop to read a step
  // or more later.
  StepStats fixed_step(const Tensor& images, const Tensor& labels, float lr, float inv_scored, uint64_t step_seed,
                       bool record, StepUpdate* update = nullptr, const FixedMicro& micro = {},
                       const FixedPeers& peers = {}, bool defer = false);
  // The host following the fixed steps read back so far (StepFollower): their scale, skips, norm,
  // optimizer count and average, oldest first; follow_all before anything reads the host's state
  // or changes it another way (an ordinary step).
  void follow_through(uint64_t ticket) override;
  void follow_all();
  // An accumulated step's earlier micro-batches as programs leave their loss sums where the program
  // runs, for the step's last to read back with its own (they return zero statistics); where the
  // step's rest runs the ordinary way instead, these sums, read now (zero when none are held).
  LossStats take_held_sums();
  // Evaluation as a fixed program (a validation batch without predictions): eval_step's
  // statistics, the same bits, forward and the loss recorded per batch size as fixed_step's are,
  // read back behind the program (pending until read).
  StepStats fixed_eval(const Tensor& images, const Tensor& labels, bool record);
  // Batch sizes whose step is recorded (tests).
  int recorded_steps() const;
  // Destroys every recorded program (before the communicators their collectives belong to: NCCL's
  // teardown waits for every graph that references a communicator to be destroyed).
  void drop_recordings() { recorded_.clear(); }
  // Whether the last fixed_step ran as its recording replayed (a CUDA graph), not launched.
  bool replayed() const { return replayed_; }

  OpContext& context() { return *ctx_; }
  ModelState& state() { return *state_; }
  Executor& executor() { return *exec_; }
  Optimizer& optimizer() { return *optimizer_; }
  WeightAverage* average() { return average_.get(); }  // train.ema, or null
  int logits_node() const { return logits_; }
  bool fused_activation() const { return fused_; }
  const Loss& loss() const { return *loss_; }

 private:
  Tensor to_device(const Tensor& host);

  std::unique_ptr<OpContext> ctx_;
  std::unique_ptr<Executor> exec_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
  std::optional<int32_t> ignore_class_;  // train.ignore_class (train_step counts the labels scored)
  std::unique_ptr<WeightAverage> average_;
  std::unique_ptr<StoreState> state_;
  int logits_ = -1;
  bool fused_ = false;  // the output layer (softmax or sigmoid) is fused into the loss
  Tensor dev_labels_;
  BatchInputs inputs_;
  // fixed_step's StepMemory in the context's memory; the recorded work per batch size.
  Tensor step_memory_;
  struct Recorded {
    RecordedStep step;
    BatchInputs inputs;  // this batch size's input and label buffers: their addresses are recorded
    Tensor labels;
  };
  std::map<std::pair<int64_t, int>, Recorded> recorded_;  // per batch size and FixedMicro::Kind, or evaluation's
  static constexpr int kEvalProgram = 4;                  // evaluation's key (past FixedMicro::Kind)
  StepRule rule_;                // the update's rule the recorded steps were made with
  StateRule moves_;              // and how their StepState moves
  struct Unfollowed {            // an updating fixed step read back, not yet followed by the host
    uint64_t ticket = 0;
    StepUpdate* update = nullptr;
  };
  std::deque<Unfollowed> unfollowed_;
  bool holding_sums_ = false;   // step memory's sums hold this step's earlier micro-batches
  int gathered_ = 0;            // ranks whose loss sums the program gathers after StepMemory (0: none)
  std::string capture_failed_;  // why recording failed (then every step runs as launched)
  std::string eval_capture_failed_;  // the same for evaluation's programs
  bool replayed_ = false;
  void size_step_memory(int ranks);
  void run_fixed(const std::vector<Tensor>& x, const Tensor& y, const FixedMicro& micro, const FixedPeers& peers);
  void backward_in_buckets(Tensor& dlogits, const Tensor& grads, const FixedMicro& micro, Communicator& comm,
                           const std::vector<BucketRange>& buckets);
  const std::vector<Tensor>& program_inputs(Recorded& r, const Tensor& images, const Tensor& labels, Tensor& y);
  void run_program(Recorded& r, bool record, const FixedPeers& peers, std::string& failed_before,
                   const std::function<void()>& work);
  const char* loss_name() const;
};

}  // namespace trainer
