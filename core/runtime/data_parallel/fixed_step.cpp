// Replica's step as a fixed program: the batch and this step's values in buffers of fixed address,
// forward, loss, backward and update recorded once per batch size (CUDA graphs) and replayed.
#include <cstddef>
#include <cstdio>
#include <stdexcept>

#include "core/runtime/data_parallel/replica.h"

namespace trainer {
namespace {

// What the host reads back once the step is done: the loss sums and the update's check.
struct StepResults {
  LossSums sums;
  StepCheck check;
};

// StepScalars and the results side by side in one buffer: one copy writes this step's values and
// zeroes its sums; one copy reads the results.
struct StepMemory {
  StepScalars scalars;
  StepResults results;
};

bool same_rule(const StepRule& a, const StepRule& b) {
  return a.check_finite == b.check_finite && a.clip == b.clip && a.limit == b.limit && a.keras == b.keras;
}

}  // namespace

int Replica::recorded_steps() const {
  int n = 0;
  for (const auto& [batch, r] : recorded_) n += r.work != nullptr;
  return n;
}

// The step's work, in the order train_step runs it, every per-step value read from step memory.
void Replica::run_fixed(const std::vector<Tensor>& x, const Tensor& y, const FixedMicro& micro, Communicator* comm) {
  auto* mem = static_cast<StepMemory*>(step_memory_.data());
  StepScalars* scalars = &mem->scalars;
  exec_->set_step_scalars(scalars);
  std::vector<const Tensor*> in;
  for (const Tensor& t : x) in.push_back(&t);
  exec_->forward(in, true, logits_);
  Tensor& dlogits = exec_->grad(logits_);
  loss_->compute_into(exec_->output(logits_), y, dlogits, scalars, &mem->results.sums);
  exec_->backward(dlogits, logits_);
  const Tensor grads = exec_->params().trainable_grads();
  if (micro.kind == FixedMicro::AddHeld) micro.held->add_into(grads);
  if (!micro.updates()) {  // an earlier micro-batch: its gradients held, no update
    micro.held->hold(grads, micro.kind == FixedMicro::HoldFirst);
  } else {
    // Several replicas: the whole gradient summed over them (after backward, not overlapping it),
    // so that every rank decides and updates from the same values.
    Tensor reduced = grads;
    if (comm) comm->issue_all_reduce_sum(reduced);
    // Loss scaling's finite check and clipping decided where the update runs (StepUpdate's rule).
    if (rule_.active()) optimizer_->decide_step(rule_, scalars, &mem->results.check);
    optimizer_->update_from(0, exec_->params().trainable_floats(), scalars);
    // Rank 0's non-trained parameters (batch-norm statistics) on every replica, as after_update.
    Tensor frozen = exec_->params().frozen_weights();
    if (comm && frozen.numel() > 0) comm->issue_broadcast(frozen, 0);
    // train.ema after them, as after_update: nothing where the step was skipped or does not average.
    if (average_) average_->update_in_step(scalars);
  }
  exec_->set_step_scalars(nullptr);  // host-side state only: the ordinary path's seeds again
}

StepStats Replica::fixed_step(const Tensor& images, const Tensor& labels, float lr, float loss_grad_scale,
                              uint64_t step_seed, bool record, StepUpdate* update, const FixedMicro& micro,
                              const FixedPeers& peers, bool defer) {
  replayed_ = false;
  if (!step_memory_.defined()) step_memory_ = ctx_->empty(Shape{int64_t(sizeof(StepMemory))}, DType::U8);
  const StepRule rule = update ? update->rule() : StepRule{};
  if (!same_rule(rule, rule_)) recorded_.clear();  // its kernels' arguments are recorded
  rule_ = rule;
  if (!micro.updates() && !micro.held) throw std::logic_error("fixed_step: a held micro-batch without its held sum");
  if (micro.updates()) optimizer_->begin_step();
  if (average_ && micro.updates()) average_->start();  // outside any recording (once)
  StepMemory host;
  if (update) update->fill(host.scalars);
  optimizer_->step_scalars(host.scalars, lr, host.scalars.grad_scale);
  // The count the update takes the optimizer to (begin_step's), unless the device skips it.
  host.scalars.average = average_ && micro.updates() && average_->averages_at(optimizer_->steps());
  host.scalars.loss_scale = loss_grad_scale;
  host.scalars.set_seed(step_seed);
  ctx_->copy_from_host(step_memory_.data(), &host, sizeof host);
  auto* mem = static_cast<StepMemory*>(step_memory_.data());
  Recorded& r = recorded_[{images.dim(0), int(micro.kind)}];
  Tensor y;  // the labels where the program reads them
  const std::vector<Tensor>& x = program_inputs(r, images, labels, y);
  run_program(r, record, peers, capture_failed_, [&] { run_fixed(x, y, micro, peers.comm); });
  // One replica whose update the host need not follow (no finite check, no clipping): the loss
  // sums read back behind the step, for the loop to read a step or more later.
  if (defer && !peers.comm && micro.kind == FixedMicro::Whole && !rule_.active())
    return StepStats(*ctx_, ctx_->read_back(&mem->results.sums, sizeof(LossSums)), loss_name());
  // Several ranks: the step's collectives done (an abortable wait, should a peer fail) before the
  // results are read.
  if (peers.comm) peers.comm->wait_issued();
  StepResults res;
  ctx_->copy_to_host(&res, static_cast<char*>(step_memory_.data()) + offsetof(StepMemory, results), sizeof res);
  // The device's decision kept on the host: a skipped step leaves the optimizer's count unchanged.
  if (update && micro.updates() && !update->settle(res.check)) optimizer_->set_steps(optimizer_->steps() - 1);
  return stats_of_sums(res.sums, loss_name());
}

// Evaluation's program (one per batch size): forward in inference mode to the logits and the
// loss's statistics added up where the kernels run, read back behind it.
StepStats Replica::fixed_eval(const Tensor& images, const Tensor& labels, bool record) {
  if (!step_memory_.defined()) step_memory_ = ctx_->empty(Shape{int64_t(sizeof(StepMemory))}, DType::U8);
  const StepMemory host;  // the sums zeroed; no gradient, so the scale (1) is never read
  ctx_->copy_from_host(step_memory_.data(), &host, sizeof host);
  Recorded& r = recorded_[{images.dim(0), kEvalProgram}];
  Tensor y;
  const std::vector<Tensor>& x = program_inputs(r, images, labels, y);
  auto* mem = static_cast<StepMemory*>(step_memory_.data());
  run_program(r, record, {}, eval_capture_failed_, [&] {
    std::vector<const Tensor*> in;
    for (const Tensor& t : x) in.push_back(&t);
    exec_->forward(in, false, logits_);
    Tensor none;
    loss_->compute_into(exec_->output(logits_), y, none, &mem->scalars, &mem->results.sums);
  });
  return StepStats(*ctx_, ctx_->read_back(&mem->results.sums, sizeof(LossSums)), loss_name());
}

// The loss kernel's name in an out-of-range label's message (stats_of_sums).
const char* Replica::loss_name() const {
  return loss_->fused_output() == std::string("sigmoid") ? "sigmoid_xent" : "cross_entropy";
}

// Buffers of this batch size's own (evaluation and other sizes use others), so that their
// addresses stay the ones recorded: the batch copied in; `y` the labels where the program reads them.
const std::vector<Tensor>& Replica::program_inputs(Recorded& r, const Tensor& images, const Tensor& labels, Tensor& y) {
  const std::vector<Tensor>& x = r.inputs.on(*ctx_, images, exec_->input_shapes());
  y = labels;
  if (!ctx_->device().is_cpu()) {
    if (r.labels.shape() != labels.shape()) r.labels = ctx_->empty(labels.shape(), labels.dtype());
    ctx_->copy_from_host(r.labels.data(), labels.data(), labels.bytes());
    y = r.labels;
  }
  return x;
}

// Runs `work` as `r`'s program: launched on its first call (plans, algorithm choices and scratch
// come with it, and NCCL's connections, which it makes lazily and a capture cannot), recorded as
// one CUDA graph on its second, replayed after; launched throughout
// where nothing can be recorded or a recording of its family failed (`failed_before`, kept:
// then always launched).
void Replica::run_program(Recorded& r, bool record, const FixedPeers& peers, std::string& failed_before,
                          const std::function<void()>& work) {
  replayed_ = false;
  // A block handed back since the recording (an arena, scratch or buffer grown by evaluation or
  // another batch size) may be one the recording uses: run as launched once more, then record again.
  if (r.work && ctx_->released_blocks() != r.released_at) {
    r.work.reset();
    r.warm = false;
  }
  // How this step runs: as launched (nothing can be recorded), launched as a size's first (plans,
  // algorithm choices and scratch come with it), recorded, or its recording replayed — with
  // several ranks, the least any rank can (the order of Mode), so that all do the same.
  enum Mode { Launch, First, Record, Replay };
  int mode = !record || !ctx_->can_capture() || !failed_before.empty() ? Launch
             : r.work                                                    ? Replay
             : !r.warm                                                   ? First
                                                                         : Record;
  if (peers.least) mode = peers.least(mode);
  if (mode == Launch || mode == First) {
    work();
    r.warm = true;
  } else if (mode == Replay) {
    r.work->replay();
    replayed_ = true;
  } else {
    r.work.reset();  // a rank that could replay records again with the others
    std::string failed;
    ctx_->begin_capture();
    try {
      work();
      r.work = ctx_->end_capture();
      r.released_at = ctx_->released_blocks();
    } catch (const DeviceError& e) {
      // A library call that cannot be recorded (or an allocation the step should not make): nothing
      // of this step ran (a capture only records), so it runs as launched, and so do the next ones.
      ctx_->abort_capture();
      exec_->set_step_scalars(nullptr);
      failed = e.what();
    } catch (...) {
      ctx_->abort_capture();
      exec_->set_step_scalars(nullptr);
      throw;
    }
    // Every rank replays what it recorded, or none does (a recording that failed anywhere).
    if (peers.least && peers.least(failed.empty() ? 1 : 0) == 0 && failed.empty()) {
      r.work.reset();
      failed = "another replica's step could not be recorded";
    }
    if (!failed.empty()) {
      failed_before = failed;
      std::fprintf(stderr, "note: %s: the step could not be recorded as a CUDA graph (%s); steps run kernel by kernel "
                   "(devices.cuda_graphs: false says the same)\n", ctx_->device().str().c_str(), failed.c_str());
      work();
    } else {
      r.work->replay();
      replayed_ = true;
    }
  }
}

}  // namespace trainer
