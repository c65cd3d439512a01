// StageRuntime: one device's part of a device-parallel model — its context, one graph per
// micro-batch sharing one parameter store, its optimizer and (on the stage holding the logits)
// the loss — and the GPipe schedule it runs: every micro-batch forward, then every one
// backward in reverse, handing activations and gradients to the other stages at boundaries.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/trainee.h"
#include "core/dist/communicator.h"
#include "core/graph/loss.h"
#include "core/checkpoint/model_state.h"
#include "core/runtime/device_parallel/mailbox.h"
#include "core/graph/executor.h"
#include "core/graph/placement.h"
#include "core/ops/step_scalars.h"
#include "core/runtime/accumulation.h"
#include "core/runtime/recorded_step.h"

namespace trainer {

// Layer `node` of stage `from`, read as input `input` of stage `to`: per micro-batch, the
// activation in the receiving stage's memory and its gradient in the sending stage's. Between two
// GPUs (or two CPU stages) the producer copies into the consumer's buffer on its own queue and
// marks it there; the consumer's queue waits for the mark (a peer copy ordered by an event: no
// host wait, the stages' hosts run ahead of their devices). Between a CPU and a GPU stage
// (`staged`) the buffers are host memory: the GPU stage copies to them and waits, or from them.
struct Boundary {
  int from = 0, node = 0, to = 0, input = 0;
  bool staged = false;
  OpContext* from_ctx = nullptr;  // the stages' contexts
  OpContext* to_ctx = nullptr;
  std::vector<Tensor> fwd, bwd;          // per micro-batch: views of fwd_mem, bwd_mem at its shape
  std::vector<Tensor> fwd_mem, bwd_mem;  // their memory (flat, grown, kept: size_boundaries)
  // Per micro-batch: the receiving stage computed no gradient of this input (the sender adds zeros).
  std::vector<char> no_grad;
};

// A hand-off's mailbox slot and mark number: boundary b, micro-batch m of at most M, `backward`
// (the gradient) or not (the activation).
inline size_t handoff_slot(size_t b, int m, bool backward, int M) { return (b * size_t(M) + size_t(m)) * 2 + (backward ? 1 : 0); }

// A graph's hooks for one pass, cleared when it ends (also by an exception: they point at its locals).
struct HookScope {
  Executor& g;
  HookScope(Executor& ex, GraphHooks h) : g(ex) { g.set_hooks(std::move(h)); }
  ~HookScope() { g.set_hooks({}); }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
};

struct MicroBatch {
  std::vector<Tensor> inputs;  // host f32, one per model input
  Tensor labels;               // host i32
};

// A layer shared across stages, as a program sums its copies' gradients on a stage holding one
// (copy `self`): in copy order from the first, on every holder, as the host's sum does.
struct StageTie {
  size_t entry = 0;                  // this stage's copy: its entry in the stage's store
  int self = 0;                      // its copy index
  std::vector<void*> into;           // per copy c: this copy's place in copy c's stage's memory
  std::vector<Tensor> gathered;      // per copy c: copy c's gradient here (gathered[self]: this one)
  std::vector<OpContext*> contexts;  // per copy: its stage's context
  size_t slot = 0;                   // copy c's post: mailbox slot and mark slot + c
};

// One step of a pipeline's program on a stage (PipelineCopy::fixed_step): what the host gives it.
struct StageStep {
  const std::vector<MicroBatch>* mbs = nullptr;
  float lr = 0, inv_scored = 0;
  uint64_t seed = 0;
  bool updates = true;      // the step's last micro-batch: the update follows (else its gradients are held)
  bool hold_first = false;  // (held) they start the held sum
  bool add_held = false;    // (updating) the held sum is added in first
  GradAccumulator* held = nullptr;
  bool record = true;       // may be recorded (a CUDA graph) and replayed
  uint64_t generation = 0;  // the boundaries' buffers' generation: a recording writes into other stages'
  int kind = 0;             // the recording's kind (with the batch's rows, its key)
  // The update decided over every stage (loss scaling, clipping; empty `checks`: nothing to decide):
  // the rule, how the state moves, the host's scale to seed it with, each stage's gathered
  // measures (checks[s]: one StepCheck per stage, in stage s's memory), the stages' contexts (whose
  // marks the gathering waits on), this stage's index and the mailbox's first slot for them.
  StepRule rule;
  StateRule moves;
  float scale = 1;
  int64_t good_steps = 0;
  std::vector<StepCheck*> checks;
  std::vector<OpContext*> contexts;
  int self = 0;
  size_t check_slots = 0;
  // Hybrid: this stage's communicator over the copies (its gradients' sum, copy 0's batch-norm
  // statistics after the update; sync_bn's statistics go through it in the layers); null: one copy.
  Communicator* comm = nullptr;
  std::vector<StageTie> ties;  // the shared layers this stage holds a copy of
};

struct StageTimes {
  double waited = 0;   // seconds blocked on other stages
  double forward = 0;  // seconds in the forward passes (the loss included), less their waits
};

class StageRuntime {
 public:
  // `logits`: the name of the layer whose output the loss scores (this stage computes the loss
  // when it holds it). Builds `microbatches` graphs on a context of its own.
  StageRuntime(const TraineeSpec& t, const Stage& st, Device device, int threads, int microbatches,
               const std::string& logits);
  // Finds this stage's boundaries among every stage's (call once all are made).
  void connect(const std::vector<Boundary>& all, int self);

  // One pass over the micro-batches. Training: forward all, backward all in reverse, the
  // parameter gradients summed over micro-batches (the loss gradient is scaled by grad_scale);
  // otherwise forward only. Returns the loss stats (zero on stages without the loss).
  LossStats run(const std::vector<MicroBatch>& mbs, bool training, float grad_scale, uint64_t seed,
                std::vector<Boundary>& bounds, Mailbox& box, int max_microbatches, StageTimes& times);

  OpContext& context() { return *ctx_; }
  Executor& graph() { return *graphs_[0]; }
  ParamStore& params() { return graphs_[0]->params(); }
  Optimizer& optimizer() { return *optimizer_; }
  WeightAverage* average() { return average_.get(); }  // train.ema, or null
  ModelState& state() { return *state_; }
  bool holds_loss() const { return loss_ != nullptr; }
  const Stage& stage() const { return stage_; }
  // Batch-norm statistics through `s` (sync_bn) in every micro-batch's graph.
  void set_sync(StatsSync* s);
  // The same pass as run() in training, as a fixed program (stage_program.cpp): each micro-batch's
  // step values (rate, seed, the loss's scale) read from step memory, the loss statistics added up
  // where the kernels run, the boundaries' hand-offs host steps between recorded pieces, this
  // stage's update (or held sum) inside — decided over every stage (loss scaling, clipping), summed
  // over the copies first (hybrid) and over a shared layer's copies, train.ema after it; recorded
  // once per kind and replayed (run_recorded). Its statistics are read back at its end (one wait,
  // as run()'s).
  LossStats run_program(const StageStep& p, std::vector<Boundary>& bounds, Mailbox& box, int max_microbatches);
  bool replayed() const { return replayed_; }  // the last run_program replayed its recording
  const StepCheck& last_check() const { return last_check_; }  // the last updating program's decision
  int recorded_programs() const;

 private:
  // The update's decision over every stage inside the program (StageStep::checks): this stage's
  // measure to every stage, the others' awaited, then the decision from all of them in order.
  void program_decide(const StageStep& p, StepMemory* mem, Mailbox& box);
  // A shared layer's copies' gradients summed into this stage's (StageStep::ties).
  void program_tie(const StageTie& t, Mailbox& box);
  StepCheck last_check_;
  void forward(int m, const MicroBatch& mb, bool training, float grad_scale, uint64_t seed, std::vector<Boundary>& bounds,
               Mailbox& box, int M, StageTimes& times, LossStats& total);
  void backward(int m, std::vector<Boundary>& bounds, Mailbox& box, int M, StageTimes& times);
  // Every micro-batch's backward (`backward(m)`, the last first), the parameter gradients summed
  // over them into the store (run()'s and run_program's).
  void backward_microbatches(int M, const std::function<void(int)>& backward);
  // A device buffer of shape `s` kept in `t` (reallocated when the shape changes).
  Tensor& sized(Tensor& t, const Shape& s, DType d = DType::F32);
  // `src` into a boundary buffer of another stage: a copy with this queue's mark `mark` behind it
  // (the hand-off's mailbox slot), or (staged, from a GPU) a copy to host memory waited for.
  void send(Tensor& dst, const Tensor& src, bool staged, size_t mark);
  // A boundary buffer posted by `bd`'s other stage, usable on this stage's queue: the buffer
  // itself once this queue waits for the sender's mark `mark`, or (staged, on a GPU) `local`
  // copied from it.
  const Tensor& receive(const Boundary& bd, const Tensor& buf, OpContext& sender, Tensor& local, size_t mark);

  Stage stage_;
  std::unique_ptr<OpContext> ctx_;
  std::vector<std::unique_ptr<Executor>> graphs_;  // one per micro-batch, sharing graphs_[0]'s parameters
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<WeightAverage> average_;
  std::unique_ptr<StoreState> state_;
  std::unique_ptr<ElementwiseKernel> elementwise_;
  int logits_ = -1;
  std::vector<std::vector<int>> reads_;        // per node: the received inputs it reads
  std::vector<std::vector<int>> last_use_;     // per node: received inputs whose gradient is final after it
  std::vector<std::vector<int>> sends_;        // per node: boundaries it feeds
  std::vector<int> incoming_;                  // per input: its boundary, or -1 (a model input)
  std::vector<std::vector<Tensor>> dev_in_;    // per input, per micro-batch (GPU stages: a model input, a staged activation)
  std::vector<Tensor> dlogits_, dev_labels_;
  std::vector<Tensor> dev_grad_;               // per boundary x micro-batch (GPU stages): a staged gradient
  Tensor acc_;                                 // gradients summed over micro-batches
  // run_program's: a StepMemory per micro-batch (its scalars: the seed, and the update's and loss's
  // values in the first), the recordings per batch rows and kind, why recording failed.
  Tensor step_memory_;
  struct Program {
    RecordedStep step;
    uint64_t generation = 0;
  };
  std::map<std::pair<int64_t, int>, Program> programs_;
  std::string program_failed_;
  bool replayed_ = false;
  void program_forward(int m, const MicroBatch& mb, StepMemory* mem, std::vector<Boundary>& bounds, Mailbox& box, int M);
  void program_backward(int m, std::vector<Boundary>& bounds, Mailbox& box, int M);
  const char* loss_name() const;
};

}  // namespace trainer
