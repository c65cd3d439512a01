// Replica's step as a fixed program: the batch and this step's values in buffers of fixed address,
// forward, loss, backward and update recorded once per batch size (CUDA graphs) and replayed.
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "core/runtime/data_parallel/replica.h"

namespace trainer {
namespace {

static_assert(sizeof(StepMemory) <= OpContext::kReadBackBytes, "a fixed step's memory is read back whole");

bool same_rule(const StepRule& a, const StepRule& b) {
  return a.check_finite == b.check_finite && a.clip == b.clip && a.limit == b.limit && a.keras == b.keras;
}
bool same_moves(const StateRule& a, const StateRule& b) {
  return a.mode == b.mode && a.growth_factor == b.growth_factor && a.backoff_factor == b.backoff_factor &&
         a.growth_interval == b.growth_interval && a.clip_value == b.clip_value;
}

}  // namespace

// With several ranks, a slot per rank after StepMemory for the gathered sums, where they all fit in
// one read-back (else the step is read at once, its statistics exchanged on the host). Made again
// only when that changes (a first training step after evaluation's programs: nothing unfollowed,
// so the host seeds the state; the old block handed back makes the programs record again).
void Replica::size_step_memory(int ranks) {
  const size_t bytes = sizeof(StepMemory) + size_t(ranks) * sizeof(LossSums);
  const int gathered = ranks > 1 && bytes <= OpContext::kReadBackBytes ? ranks : 0;
  if (step_memory_.defined() && gathered == gathered_) return;
  if (!unfollowed_.empty()) throw std::logic_error("fixed_step: the step memory changes with steps unread");
  gathered_ = gathered;
  step_memory_ = ctx_->empty(Shape{int64_t(gathered > 0 ? bytes : sizeof(StepMemory))}, DType::U8);
}

int Replica::recorded_steps() const {
  int n = 0;
  for (const auto& [batch, r] : recorded_) n += r.step.work != nullptr;
  return n;
}

// The step's work, in the order train_step runs it, every per-step value read from step memory.
void Replica::run_fixed(const std::vector<Tensor>& x, const Tensor& y, const FixedMicro& micro, const FixedPeers& peers) {
  Communicator* comm = peers.comm;
  auto* mem = static_cast<StepMemory*>(step_memory_.data());
  StepScalars* scalars = &mem->scalars;
  // This step's factors, corrections and cadence from the state the steps before it left.
  optimizer_->begin_fixed(&mem->state, moves_, scalars);
  exec_->set_step_scalars(scalars);
  std::vector<const Tensor*> in;
  for (const Tensor& t : x) in.push_back(&t);
  exec_->forward(in, true, logits_);
  Tensor& dlogits = exec_->grad(logits_);
  loss_->compute_into(exec_->output(logits_), y, dlogits, scalars, &mem->sums);
  const Tensor grads = exec_->params().trainable_grads();
  const bool bucketed = comm && peers.buckets && micro.updates();
  if (bucketed) {
    backward_in_buckets(dlogits, grads, micro, *comm, *peers.buckets);
  } else {
    exec_->backward(dlogits, logits_);
    if (micro.kind == FixedMicro::AddHeld) micro.held->add_into(grads);
  }
  if (!micro.updates()) {  // an earlier micro-batch: its gradients held, no update
    micro.held->hold(grads, micro.kind == FixedMicro::HoldFirst);
  } else {
    // Several replicas: the gradient summed over them (each bucket as backward finishes it, or the
    // whole after backward), so that every rank decides and updates from the same values.
    Tensor reduced = grads;
    if (comm && peers.waiting) peers.waiting();  // where the collectives run as called, the rank waits for the others here
    if (bucketed) comm->join_started();
    else if (comm) comm->issue_all_reduce_sum(reduced);
    // Loss scaling's finite check and clipping decided where the update runs (StepUpdate's rule).
    if (rule_.active()) optimizer_->decide_step(rule_, scalars, &mem->check);
    optimizer_->update_from(0, exec_->params().trainable_floats(), scalars);
    // Rank 0's non-trained parameters (batch-norm statistics) on every replica, as after_update.
    Tensor frozen = exec_->params().frozen_weights();
    if (comm && frozen.numel() > 0) comm->issue_broadcast(frozen, 0);
    // train.ema after them, as after_update: nothing where the step was skipped or does not average.
    if (average_) average_->update_in_step(scalars);
    // The scale and the count moved as the host's scaler and optimizer move them.
    optimizer_->end_fixed(&mem->state, moves_, scalars);
    // Every rank's loss sums into every rank's memory behind it (a byte copy each), for the host to
    // add up in rank order when it reads the step — as the host exchange adds them (Trainee::agree).
    if (gathered_ > 0) {
      char* slots = static_cast<char*>(step_memory_.data()) + sizeof(StepMemory);
      ctx_->copy(slots + size_t(comm->rank()) * sizeof(LossSums), &mem->sums, sizeof(LossSums));
      Tensor all = Tensor::view(slots, Shape{gathered_ * int64_t(sizeof(LossSums) / sizeof(float))}, DType::F32, ctx_->device());
      comm->issue_all_gather(all);
    }
  }
  exec_->set_step_scalars(nullptr);  // host-side state only: the ordinary path's seeds again
}

// Backward with each bucket's sum started as soon as backward has finished it (the executor's
// frontier hook, swapped in for this backward): the last micro-batch of an accumulated step first
// adds the held sum into the bucket's range, as the ordinary step's hook does.
void Replica::backward_in_buckets(Tensor& dlogits, const Tensor& grads, const FixedMicro& micro, Communicator& comm,
                                  const std::vector<BucketRange>& buckets) {
  size_t next = buckets.size();  // handed over from the last (highest offsets) down
  int64_t added_to = grads.numel();
  auto start_done = [&](int64_t frontier) {
    if (micro.kind == FixedMicro::AddHeld && frontier < added_to) {
      micro.held->add_into(grads, frontier, added_to);
      added_to = frontier;
    }
    for (; next > 0 && buckets[next - 1].begin >= frontier; --next) {
      Tensor part = grads.slice(buckets[next - 1].begin, buckets[next - 1].end);
      comm.start_all_reduce_sum(part);
    }
  };
  std::function<void(int64_t)> ordinary = exec_->backward_hook();
  exec_->set_backward_hook(start_done);
  try {
    exec_->backward(dlogits, logits_);
  } catch (...) {
    exec_->set_backward_hook(std::move(ordinary));
    throw;
  }
  exec_->set_backward_hook(std::move(ordinary));
  if (next != 0 || (micro.kind == FixedMicro::AddHeld && added_to != 0)) throw std::logic_error("fixed step: backward ended with buckets not started");
}

StepStats Replica::fixed_step(const Tensor& images, const Tensor& labels, float lr, float inv_scored, uint64_t step_seed,
                              bool record, StepUpdate* update, const FixedMicro& micro, const FixedPeers& peers,
                              bool defer) {
  replayed_ = false;
  size_step_memory(peers.comm ? peers.comm->size() : 1);
  const StepRule rule = update ? update->rule() : StepRule{};
  const StateRule moves = update ? update->state_rule() : StateRule{};
  if (!same_rule(rule, rule_) || !same_moves(moves, moves_)) recorded_.clear();  // its kernels' arguments are recorded
  rule_ = rule;
  moves_ = moves;
  if (!micro.updates() && !micro.held) throw std::logic_error("fixed_step: a held micro-batch without its held sum");
  if (micro.updates()) optimizer_->begin_step();  // the host's count: ahead by the steps not yet followed
  if (average_ && micro.updates()) average_->start();  // outside any recording (once)
  // The host's values; the program derives the rest where it runs from the state the steps before
  // it left (begin_fixed). Adam's corrections for every count the step may take the optimizer to:
  // the host's count, less any of the unfollowed steps that the device skipped.
  if (unfollowed_.size() + 1 >= size_t(StepScalars::kBiasRing))
    throw std::logic_error("fixed_step: more steps unread than the corrections' ring holds");
  StepMemory host;
  host.scalars.lr = lr;
  host.scalars.inv_scored = inv_scored;
  host.scalars.set_seed(step_seed);
  host.scalars.average_every = average_ ? uint32_t(average_->every()) : 0u;
  const int64_t top = optimizer_->steps() + (micro.updates() ? 0 : 1);
  for (int64_t t = std::max<int64_t>(1, top - StepScalars::kBiasRing + 1); t <= top; ++t)
    optimizer_->bias_at(t, host.scalars.bias_ring[t % StepScalars::kBiasRing][0],
                        host.scalars.bias_ring[t % StepScalars::kBiasRing][1]);
  // With every earlier step followed, the host's state is the device's: seeded from it (a resume,
  // a restored scale, steps run the ordinary way); otherwise the device's carries on.
  const bool seed = unfollowed_.empty();
  if (seed) {
    host.state.scale = update ? update->scaler().scale() : 1.0f;
    host.state.good_steps = update ? update->scaler().good_steps() : 0;
    host.state.updates = optimizer_->steps() - (micro.updates() ? 1 : 0);
  }
  // The step's loss sums start with its first micro-batch that runs as a program (the earlier ones'
  // sums are the host's when they ran the ordinary way); the later ones add to them.
  const bool fresh = micro.kind == FixedMicro::Whole || micro.kind == FixedMicro::HoldFirst || !holding_sums_;
  const size_t from = seed ? 0 : offsetof(StepMemory, scalars), to = fresh ? sizeof host : offsetof(StepMemory, sums);
  ctx_->copy_from_host(static_cast<char*>(step_memory_.data()) + from, reinterpret_cast<const char*>(&host) + from, to - from);
  holding_sums_ = !micro.updates();
  Recorded& r = recorded_[{images.dim(0), int(micro.kind)}];
  Tensor y;  // the labels where the program reads them
  const std::vector<Tensor>& x = program_inputs(r, images, labels, y);
  run_program(r, record, peers, capture_failed_, [&] { run_fixed(x, y, micro, peers); });
  // An earlier micro-batch of the step: nothing to read (its sums are in the last's), nothing met.
  if (!micro.updates()) return StepStats(LossStats{});
  // The step's memory read back behind it; the host follows it when its statistics are read.
  const uint64_t ticket = ctx_->read_back(step_memory_.data(), size_t(step_memory_.numel()));
  unfollowed_.push_back({ticket, update});
  // Read later where asked (`defer`) and the statistics are the job's as read: one replica, or
  // every rank's sums gathered. Otherwise now (several ranks: once the step's collectives are
  // done — an abortable wait, should a peer fail), this rank's own sums, for the host exchange.
  const bool late = defer && (!peers.comm || peers.comm->size() == 1 || gathered_ > 0);
  StepStats s(*ctx_, ticket, loss_name(), this,
              {update != nullptr && update->clip().enabled(), update != nullptr && update->scaler().enabled()},
              late ? gathered_ : 0);
  if (late && gathered_ > 0) s.abort_with(peers.comm);  // read abortably: a peer may fail before joining the collectives
  if (late) return s;
  if (peers.comm) {
    if (peers.waiting) peers.waiting();
    peers.comm->wait_issued();
  }
  s.get();
  return s;
}

// The host's scaler, norm, optimizer count and moving average follow each updating step as the
// device decided it, oldest first (StepUpdate::settle: a skipped step leaves the count as it was);
// the device's state after it must then be the host's.
void Replica::follow_through(uint64_t ticket) {
  while (!unfollowed_.empty() && unfollowed_.front().ticket <= ticket) {
    const Unfollowed u = unfollowed_.front();
    unfollowed_.pop_front();
    StepMemory m;
    std::memcpy(&m, ctx_->read_back_wait(u.ticket), sizeof m);
    if (u.update && !u.update->settle(m.check)) optimizer_->set_steps(optimizer_->steps() - 1);
    if (average_) average_->followed(m.state.updates);
    const int64_t confirmed = optimizer_->steps() - int64_t(unfollowed_.size());
    const float scale = u.update ? u.update->scaler().scale() : 1.0f;
    if (m.state.updates != confirmed || m.state.scale != scale)
      throw std::logic_error(fmt::format("fixed step: the device's state ({} updates, loss scale {}) is not the host's ({}, {})",
                                         m.state.updates, m.state.scale, confirmed, scale));
  }
}

void Replica::follow_all() { follow_through(UINT64_MAX); }

// The sums an accumulated step's earlier micro-batches left in step memory, read now (the step's
// rest runs the ordinary way, whose statistics the host adds up).
LossStats Replica::take_held_sums() {
  if (!holding_sums_) return {};
  holding_sums_ = false;
  return StepStats(*ctx_, ctx_->read_back(step_memory_.data(), sizeof(StepMemory)), loss_name()).get();  // this rank's
}

// Evaluation's program (one per batch size): forward in inference mode to the logits and the
// loss's statistics added up where the kernels run, read back behind it.
StepStats Replica::fixed_eval(const Tensor& images, const Tensor& labels, bool record) {
  if (!step_memory_.defined()) size_step_memory(1);
  if (holding_sums_) throw std::logic_error("fixed_eval: an accumulated step's micro-batches are not all run");
  // The sums zeroed (no gradient, so the scale is never read); the training steps' state kept.
  const StepMemory host;
  constexpr size_t kFrom = offsetof(StepMemory, scalars);
  ctx_->copy_from_host(static_cast<char*>(step_memory_.data()) + kFrom, reinterpret_cast<const char*>(&host) + kFrom,
                       sizeof host - kFrom);
  Recorded& r = recorded_[{images.dim(0), kEvalProgram}];
  Tensor y;
  const std::vector<Tensor>& x = program_inputs(r, images, labels, y);
  auto* mem = static_cast<StepMemory*>(step_memory_.data());
  run_program(r, record, {}, eval_capture_failed_, [&] {
    std::vector<const Tensor*> in;
    for (const Tensor& t : x) in.push_back(&t);
    exec_->set_step_scalars(&mem->scalars);  // what layers find (an embedding's bad id) goes into the sums
    exec_->forward(in, false, logits_);
    Tensor none;
    loss_->compute_into(exec_->output(logits_), y, none, &mem->scalars, &mem->sums);
    exec_->set_step_scalars(nullptr);
  });
  return StepStats(*ctx_, ctx_->read_back(mem, sizeof(StepMemory)), loss_name());
}

// The loss kernel's name in an out-of-range label's message (StepStats::get).
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

// Runs `work` as `r`'s program (run_recorded): a capture that fails part-way joins the sums it
// started beside it first (a fork not rejoined fails the capture's end), whatever that reports.
void Replica::run_program(Recorded& r, bool record, const FixedPeers& peers, std::string& failed_before,
                          const std::function<void()>& work) {
  RecordHooks hooks;
  hooks.least = peers.least;
  hooks.abandon = [&] {
    try {
      if (peers.comm) peers.comm->join_started();
    } catch (const DeviceError&) {
    }
    exec_->set_step_scalars(nullptr);
  };
  replayed_ = false;  // (as it stays where the step throws)
  replayed_ = run_recorded(*ctx_, r.step, record, failed_before, work, hooks);
}

}  // namespace trainer
