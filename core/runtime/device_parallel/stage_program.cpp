// A stage's part of a pipeline step as a fixed program: step memory per micro-batch, the boundaries'
// hand-offs as host steps between recorded pieces, the update inside; recorded once and replayed.
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/runtime/device_parallel/stage.h"
#include "core/runtime/step_stats.h"

namespace trainer {
namespace {

// The host's part of a hand-off, kept by a recording for every replay (OpContext::host_step): it
// holds only what outlives the step — the mailbox, the contexts, the boundary. `at` is the
// hand-off's mailbox slot and its mark's number.
std::function<void()> posting(Mailbox* box, size_t at, OpContext* self) {
  return [box, at, self] {
    self->mark_queue_at(at);  // behind the copy into the other stage's buffer
    box->post(at);
  };
}
std::function<void()> receiving(Mailbox* box, size_t at, OpContext* self, OpContext* sender) {
  return [box, at, self, sender] {
    box->wait(at);
    self->wait_for_mark_at(*sender, at);  // this queue after the sender's copy, and only that
  };
}

}  // namespace

int StageRuntime::recorded_programs() const {
  int n = 0;
  for (const auto& [key, p] : programs_) n += p.step.work != nullptr;
  return n;
}

const char* StageRuntime::loss_name() const {
  return loss_ && loss_->fused_output() == std::string("sigmoid") ? "sigmoid_xent" : "cross_entropy";
}

LossStats StageRuntime::run_program(const StageStep& p, std::vector<Boundary>& bounds, Mailbox& box, int max_microbatches) {
  const std::vector<MicroBatch>& mbs = *p.mbs;
  const int M = int(mbs.size());
  const bool cpu = ctx_->device().is_cpu();
  replayed_ = false;
  // Outside any recording: the step memory, this step's values, the batch's inputs and labels in
  // buffers whose addresses the recording keeps (made again only when a shape changes).
  const size_t bytes = size_t(max_microbatches) * sizeof(StepMemory);
  if (!step_memory_.defined() || size_t(step_memory_.numel()) != bytes) step_memory_ = ctx_->empty(Shape{int64_t(bytes)}, DType::U8);
  if (p.updates) optimizer_->begin_step();  // the host's count, as the ordinary update's step()
  std::vector<StepMemory> host(static_cast<size_t>(M));
  for (int m = 0; m < M; ++m) {
    StepScalars& s = host[size_t(m)].scalars;
    s.lr = p.lr;
    s.inv_scored = p.inv_scored;
    s.set_seed(p.seed * 0x9E3779B97F4A7C15ull + uint64_t(m));  // run()'s per micro-batch seed
    s.average_every = average_ ? uint32_t(average_->every()) : 0u;  // train.ema's cadence
  }
  // The first memory's state and Adam's corrections: every pipeline program is read as it ends, so
  // the host's count is the device's (seeded each step, as a replica seeds it with nothing unread).
  const int64_t top = optimizer_->steps() + (p.updates ? 0 : 1);
  for (int64_t t = std::max<int64_t>(1, top - StepScalars::kBiasRing + 1); t <= top; ++t)
    optimizer_->bias_at(t, host[0].scalars.bias_ring[t % StepScalars::kBiasRing][0],
                        host[0].scalars.bias_ring[t % StepScalars::kBiasRing][1]);
  host[0].state.updates = optimizer_->steps() - (p.updates ? 1 : 0);
  host[0].state.scale = p.scale;  // every step is read as it ends: the host's scale is the device's
  host[0].state.good_steps = p.good_steps;
  ctx_->copy_from_host(step_memory_.data(), host.data(), size_t(M) * sizeof(StepMemory));
  if (!cpu)
    for (int m = 0; m < M; ++m) {
      const MicroBatch& mb = mbs[size_t(m)];
      for (size_t k = 0; k < stage_.model_inputs.size(); ++k) {
        if (incoming_[k] >= 0) continue;
        const Tensor& x = mb.inputs[size_t(stage_.model_inputs[k])];
        Tensor& d = sized(dev_in_[k][size_t(m)], x.shape());
        ctx_->copy_from_host(d.data(), x.data(), x.bytes());
      }
      if (loss_) {
        Tensor& y = sized(dev_labels_[size_t(m)], mb.labels.shape(), DType::I32);
        ctx_->copy_from_host(y.data(), mb.labels.data(), mb.labels.bytes());
      }
    }
  auto* mem = static_cast<StepMemory*>(step_memory_.data());
  Tensor grads = params().trainable_grads();
  auto unset = [&] {
    for (auto& g : graphs_) g->set_step_scalars(nullptr);
  };
  auto work = [&] {
    struct Unset {  // the executors read host-side seeds again when the work ends, by an exception too
      const std::function<void()> f;
      ~Unset() { f(); }
    } guard{unset};
    // The step's factors (the loss's scale, the update's) from its values, where the kernels run.
    optimizer_->begin_fixed(&mem[0].state, p.moves, &mem[0].scalars);
    for (int m = 0; m < M; ++m) program_forward(m, mbs[size_t(m)], mem, bounds, box, max_microbatches);
    backward_microbatches(M, [&](int m) { program_backward(m, bounds, box, max_microbatches); });
    if (!p.updates) return p.held->hold(grads, p.hold_first);
    if (p.add_held) p.held->add_into(grads);
    // Hybrid: this stage's gradients summed over the copies before anything reads them (as pass()).
    if (p.comm) p.comm->issue_all_reduce_sum(grads);
    for (const StageTie& t : p.ties) program_tie(t, box);  // then a shared layer's copies (as reduce_and_update)
    if (!p.checks.empty()) program_decide(p, mem, box);
    optimizer_->update_from(0, grads.numel(), &mem[0].scalars);
    // As after_update: copy 0's batch-norm statistics on every copy, then train.ema (nothing where
    // the step was skipped or does not average: the kernel reads the step's scalars).
    if (p.comm) {
      Tensor frozen = params().frozen_weights();
      if (frozen.numel() > 0) p.comm->issue_broadcast(frozen, 0);
    }
    if (average_) average_->update_in_step(&mem[0].scalars);
    optimizer_->end_fixed(&mem[0].state, p.moves, &mem[0].scalars);
  };
  int64_t rows = 0;
  for (const MicroBatch& mb : mbs) rows += mb.labels.dim(0);
  Program& rec = programs_[{rows, p.kind}];
  // Another stage's buffer this recording copies into was made again (a shape changed): record again.
  if (rec.generation != p.generation) {
    rec.step.work.reset();
    rec.step.warm = false;
    rec.generation = p.generation;
  }
  // Hybrid on a device that records: stage s of every copy runs its program alike (launched,
  // recorded or replayed: their collectives meet), the least mode any copy can, agreed on the host.
  RecordHooks hooks;
  if (p.comm && p.comm->size() > 1 && ctx_->can_capture())
    hooks.least = [comm = p.comm](int v) {
      std::vector<double> seen(4, 0.0);  // run_recorded's modes; 0/1 for its recording's success
      seen[size_t(v)] = 1;
      comm->all_reduce_host(seen);
      for (size_t i = 0; i < seen.size(); ++i)
        if (seen[i] > 0) return int(i);
      throw std::logic_error("pipeline program: no copy's mode");
    };
  replayed_ = run_recorded(*ctx_, rec.step, p.record, program_failed_, work, hooks);
  if (p.comm) p.comm->wait_issued();  // abortably: a copy may fail before joining the sums
  // The statistics (the loss stage's; an embedding's bad id on any), read back as the step ends.
  const char* back = static_cast<const char*>(ctx_->read_back_wait(ctx_->read_back(mem, size_t(M) * sizeof(StepMemory))));
  LossStats total;
  for (int m = 0; m < M; ++m) {
    StepMemory one;
    std::memcpy(&one, back + size_t(m) * sizeof(StepMemory), sizeof one);
    total += stats_of_sums(one.sums, loss_name());
    if (m == 0) last_check_ = one.check;
  }
  return total;
}

void StageRuntime::program_decide(const StageStep& p, StepMemory* mem, Mailbox& box) {
  const int S = int(p.checks.size()), me = p.self;
  StepCheck* mine = p.checks[size_t(me)] + me;
  optimizer_->measure_step(p.rule, mine);
  for (int o = 0; o < S; ++o)
    if (o != me) ctx_->copy(p.checks[size_t(o)] + me, mine, sizeof(StepCheck));
  ctx_->host_step(posting(&box, p.check_slots + size_t(me), ctx_.get()));
  for (int o = 0; o < S; ++o)
    if (o != me) ctx_->host_step(receiving(&box, p.check_slots + size_t(o), ctx_.get(), p.contexts[size_t(o)]));
  optimizer_->decide_parts(p.rule, p.checks[size_t(me)], S, &mem[0].scalars, &mem[0].check);
}

// This copy's gradient into every holder's memory (its own too) and posted; the others' awaited;
// then the sum in copy order — ((g0 + g1) + g2)..., each an f32 add — the host's order.
void StageRuntime::program_tie(const StageTie& t, Mailbox& box) {
  Tensor g = params().grad_view(t.entry);
  const size_t n = t.into.size();
  for (size_t c = 0; c < n; ++c) ctx_->copy(t.into[c], g.data(), g.bytes());
  ctx_->host_step(posting(&box, t.slot + size_t(t.self), ctx_.get()));
  for (size_t c = 0; c < n; ++c)
    if (int(c) != t.self) ctx_->host_step(receiving(&box, t.slot + c, ctx_.get(), t.contexts[c]));
  ctx_->copy(g.data(), t.gathered[0].data(), g.bytes());
  for (size_t c = 1; c < n; ++c) elementwise_->accumulate(t.gathered[c], g);
}

// run()'s forward of micro-batch m with the step's values read from memory m (the seed) and 0 (the
// loss's scale; the loss's sums), the hand-offs as host steps; direct boundaries only.
void StageRuntime::program_forward(int m, const MicroBatch& mb, StepMemory* mem, std::vector<Boundary>& bounds,
                                   Mailbox& box, int M) {
  Executor& g = *graphs_[size_t(m)];
  const bool cpu = ctx_->device().is_cpu();
  std::vector<const Tensor*> in(stage_.model_inputs.size());
  for (size_t k = 0; k < in.size(); ++k)
    in[k] = incoming_[k] >= 0 ? &bounds[size_t(incoming_[k])].fwd[size_t(m)]
            : cpu             ? &mb.inputs[size_t(stage_.model_inputs[k])]
                              : &dev_in_[k][size_t(m)];
  GraphHooks h;
  h.before_forward = [&](int i) {
    for (int k : reads_[size_t(i)]) {
      const size_t b = size_t(incoming_[size_t(k)]);
      ctx_->host_step(receiving(&box, handoff_slot(b, m, false, M), ctx_.get(), bounds[b].from_ctx));
    }
  };
  h.after_forward = [&](int i) {
    for (int b : sends_[size_t(i)]) {
      Tensor& dst = bounds[size_t(b)].fwd[size_t(m)];
      ctx_->copy(dst.data(), g.output(i).data(), dst.bytes());
      ctx_->host_step(posting(&box, handoff_slot(size_t(b), m, false, M), ctx_.get()));
    }
  };
  HookScope scope(g, std::move(h));
  g.set_step_scalars(&mem[m].scalars);
  g.forward(in, true, g.last_node());
  if (loss_) {
    const Tensor& labels = cpu ? mb.labels : dev_labels_[size_t(m)];
    loss_->compute_into(g.output(logits_), labels, sized(dlogits_[size_t(m)], g.output(logits_).shape()), &mem[0].scalars,
                        &mem[0].sums);
  }
}

// run()'s backward of micro-batch m, the hand-offs as host steps. Whether the other stage sends a
// gradient is the graph's (the first run, launched, tells): a recording keeps the answer it found.
void StageRuntime::program_backward(int m, std::vector<Boundary>& bounds, Mailbox& box, int M) {
  Executor& g = *graphs_[size_t(m)];
  GraphHooks h;
  h.before_backward = [&](int i) {
    if (i == logits_) g.add_grad(i, dlogits_[size_t(m)]);
    for (int b : sends_[size_t(i)]) {
      Boundary& bd = bounds[size_t(b)];
      // Whether a gradient comes is the other stage's graph's (the same every step). Run as called,
      // the flag is read once the sender posted; a recording keeps the answer of the last step (a
      // capture waits for nobody), and each replay checks it against the sender's.
      char* flag = &bd.no_grad[size_t(m)];
      auto read = [flag] { return std::atomic_ref<char>(*flag).load(std::memory_order_relaxed); };
      std::function<void()> receive = receiving(&box, handoff_slot(size_t(b), m, true, M), ctx_.get(), bd.to_ctx);
      char none = 0;
      if (ctx_->capturing()) {
        none = read();
        ctx_->host_step([receive, read, none] {
          receive();
          if (read() != none)
            throw std::logic_error("pipeline program: a boundary's gradient came where the recording had none, or none came");
        });
      } else {
        ctx_->host_step(receive);  // runs now
        none = read();
      }
      Tensor& d = bd.bwd[size_t(m)];
      if (none) ctx_->fill_zero(d.data(), d.bytes());
      g.add_grad(i, d);
    }
  };
  h.after_backward = [&](int i) {
    for (int k : last_use_[size_t(i)]) {
      const size_t b = size_t(incoming_[size_t(k)]);
      Boundary& bd = bounds[b];
      const char none = g.input_grad_written(k) ? 0 : 1;
      if (!none) ctx_->copy(bd.bwd[size_t(m)].data(), g.input_grad(k).data(), bd.bwd[size_t(m)].bytes());
      std::function<void()> post = posting(&box, handoff_slot(b, m, true, M), ctx_.get());
      char* flag = &bd.no_grad[size_t(m)];
      ctx_->host_step([post, flag, none] {
        std::atomic_ref<char>(*flag).store(none, std::memory_order_relaxed);
        post();
      });
    }
  };
  HookScope scope(g, std::move(h));
  g.backward_all();
}

}  // namespace trainer
