// Device-parallel training: stages built from the placement, micro-batches through the GPipe
// schedule on the stage threads, shared-layer gradient sums and the optimizer step per stage.
#include "core/runtime/device_parallel/pipeline_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <map>

#include "core/runtime/devices.h"
#include "core/graph/loss.h"
#include "core/runtime/batch_inputs.h"
#include "core/runtime/comm_stats.h"
#include "core/runtime/progress.h"

namespace trainer {
namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A stage's ModelState, used from any thread: every call runs on the stage's own thread.
class OnStageThread final : public ModelState {
 public:
  OnStageThread(ModelState& s, StageThreads& t, int stage) : s_(s), t_(t), stage_(stage) {}
  const std::vector<ParamEntry>& entries() const override { return s_.entries(); }
  int64_t total_floats() const override { return s_.total_floats(); }
  std::vector<float> download_weights() override { return on([&] { return s_.download_weights(); }); }
  void upload_weights(const std::vector<float>& w) override {
    t_.run_on(stage_, [&] { s_.upload_weights(w); });
  }
  std::vector<std::string> optimizer_state_names() override { return s_.optimizer_state_names(); }
  std::vector<float> download_state(const std::string& n) override { return on([&] { return s_.download_state(n); }); }
  void upload_state(const std::string& n, const std::vector<float>& v) override {
    t_.run_on(stage_, [&] { s_.upload_state(n, v); });
  }
  int64_t optimizer_steps() const override { return s_.optimizer_steps(); }
  void set_optimizer_steps(int64_t steps) override { s_.set_optimizer_steps(steps); }
  bool has_average() const override { return s_.has_average(); }
  std::vector<float> download_average() override { return on([&] { return s_.download_average(); }); }
  void upload_average(const std::vector<float>& v) override {
    t_.run_on(stage_, [&] { s_.upload_average(v); });
  }

 private:
  std::vector<float> on(const std::function<std::vector<float>()>& f) {
    std::vector<float> out;
    t_.run_on(stage_, [&] { out = f(); });
    return out;
  }
  ModelState& s_;
  StageThreads& t_;
  int stage_;
};

}  // namespace

std::vector<Device> placement_devices(const Placement& p, const DevicesSpec& r, std::vector<std::string>* notes) {
  std::vector<Device> gpus;
  const bool want_gpus = !r.gpus.empty() || r.all_gpus;
  if (want_gpus) gpus = select_devices(r);
  std::vector<Device> out;
  for (const std::string& label : p.devices) {
    if (label == "cpu") {
      out.push_back(Device::cpu(0));
    } else if (label.rfind("cpu:", 0) == 0) {
      out.push_back(Device::cpu(std::stoi(label.substr(4))));
    } else {
      int n = std::stoi(label.substr(4));
      if (!want_gpus) {
        out.push_back(Device::cpu(1000 + n));
        if (notes) notes->push_back(fmt::format("{} runs on a virtual CPU device (no GPUs requested: --gpus or devices.gpus)", label));
      } else if (size_t(n) >= gpus.size()) {
        throw DeviceError(fmt::format("placement uses {}, but {} GPU(s) were requested (--gpus or devices.gpus)", label, gpus.size()));
      } else {
        out.push_back(gpus[size_t(n)]);
      }
    }
  }
  return out;
}

PipelineCopy::PipelineCopy(const TraineeSpec& t, const std::vector<Device>& devices, int threads)
    : cuda_graphs_(t.cuda_graphs), microbatches_(t.microbatches) {
  accumulate_ = t.accumulate;
  update_ = StepUpdate(t.loss_scale, t.clip);
  sync_bn_ = t.sync_bn;
  // Test hook: TRAINER_TEST_FIXED_STEP=1 runs the stages' programs on the CPU too (program_ok).
  if (const char* v = std::getenv("TRAINER_TEST_FIXED_STEP")) fixed_anywhere_ = std::string(v) == "1";
  const std::shared_ptr<const Graph> whole = t.graph ? t.graph : std::make_shared<const Graph>(t.model);
  const Graph& full = *whole;
  std::vector<Shape> shapes;
  for (const GraphNode& n : full.nodes()) shapes.push_back(n.shape);
  input_shapes_ = full.input_shapes();
  std::string logits;
  {
    auto cpu = make_context(Device::cpu(0));
    auto loss = make_loss(t.loss, *cpu);
    logits = full.nodes()[size_t(loss_head(full, *loss).logits)].layer->name();
  }
  std::vector<Stage> stages = make_stages(t.model, t.placement, shapes);
  for (const Stage& st : stages)
    stages_.push_back(std::make_unique<StageRuntime>(t, st, devices[size_t(st.device)], threads, microbatches_, logits));
  // Boundaries: every received input of every stage, from the stage holding its layer.
  for (size_t c = 0; c < stages.size(); ++c)
    for (size_t k = 0; k < stages[c].model_inputs.size(); ++k) {
      if (stages[c].model_inputs[k] >= 0) continue;
      const std::string& name = stages[c].spec.inputs[k].name;
      for (size_t p = 0; p < stages.size(); ++p) {
        int node = stages_[p]->graph().node_index(name);
        if (node < 0) continue;
        Boundary bd;
        bd.from = int(p);
        bd.node = node;
        bd.to = int(c);
        bd.input = int(k);
        bd.from_ctx = &stages_[p]->context();
        bd.to_ctx = &stages_[c]->context();
        bd.staged = bd.from_ctx->device().is_cpu() != bd.to_ctx->device().is_cpu();
        bounds_.push_back(std::move(bd));
      }
    }
  for (size_t s = 0; s < stages_.size(); ++s) stages_[s]->connect(bounds_, int(s));
  // Parameters with copies on several stages (a layer shared across devices).
  std::map<std::string, std::vector<std::pair<int, size_t>>> copies;
  for (size_t s = 0; s < stages_.size(); ++s) {
    const auto& entries = stages_[s]->params().entries();
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].spec.trainable) copies[entries[i].name].push_back({int(s), i});
  }
  for (auto& [name, list] : copies)
    if (list.size() > 1) tied_.push_back(list);

  threads_ = std::make_unique<StageThreads>(int(stages_.size()), [this](int s) { stages_[size_t(s)]->context().bind_thread(); }, box_);
  // Each stage copies into its neighbours' memory (activations forward, gradients back): direct
  // where the devices allow it (GPUs: peer access), on each stage's thread (its current device).
  // A mark per hand-off (boundary, micro-batch, direction: the mailbox's slots), made on each
  // stage's thread before any other waits on them.
  threads_->run_all([&](int s) {
    for (const Boundary& bd : bounds_) {
      if (bd.staged) continue;
      if (bd.from == s) bd.from_ctx->enable_peer(*bd.to_ctx);
      if (bd.to == s) bd.to_ctx->enable_peer(*bd.from_ctx);
    }
    // Every other stage too: a program deciding loss scaling or clipping sends its measure to each.
    for (size_t o = 0; o < stages_.size(); ++o)
      if (o != size_t(s)) stages_[size_t(s)]->context().enable_peer(stages_[o]->context());
    stages_[size_t(s)]->context().reserve_marks(slot_count());
  });
  std::vector<ModelState*> parts;
  for (size_t s = 0; s < stages_.size(); ++s) {
    stage_states_.push_back(std::make_unique<OnStageThread>(stages_[s]->state(), *threads_, int(s)));
    parts.push_back(stage_states_.back().get());
  }
  state_ = std::make_unique<TiedState>(parts);
  reset_bubble();
  times_.stages.resize(stages_.size());
  // The update's parts: each stage's optimizer; a shared layer's later copies are in the norm once.
  update_parts_.resize(stages_.size());
  for (size_t st = 0; st < stages_.size(); ++st) update_parts_[st].optimizer = &stages_[st]->optimizer();
  for (const auto& copies : tied_)
    for (size_t c = 1; c < copies.size(); ++c) {
      const ParamEntry& p = stages_[size_t(copies[c].first)]->params().entries()[copies[c].second];
      update_parts_[size_t(copies[c].first)].counted_elsewhere.push_back({p.offset, p.offset + p.spec.shape.numel()});
    }
  if (accumulate_ > 1) {  // each stage's held sum, made on its own thread (its device)
    held_grads_.resize(stages_.size());
    threads_->run_all([&](int st) {
      held_grads_[size_t(st)] = std::make_unique<GradAccumulator>(stages_[size_t(st)]->context(),
                                                            stages_[size_t(st)]->params().trainable_floats());
    });
  }
}

PipelineCopy::~PipelineCopy() { threads_.reset(); }

std::vector<MicroBatch> PipelineCopy::micro_batches(const Batch& b, int M) {
  const int64_t n = b.images.dim(0);
  M = int(std::max<int64_t>(1, std::min<int64_t>(M, n)));
  const std::vector<Tensor>& inputs = batch_inputs_.on_host(b.images, input_shapes_);
  std::vector<MicroBatch> mbs(static_cast<size_t>(M));
  std::vector<int64_t> lo(size_t(M) + 1);
  for (int m = 0; m <= M; ++m) lo[size_t(m)] = n * m / M;
  for (int m = 0; m < M; ++m) {
    for (const Tensor& x : inputs) mbs[size_t(m)].inputs.push_back(x.slice(lo[size_t(m)], lo[size_t(m) + 1]));
    mbs[size_t(m)].labels = b.labels.slice(lo[size_t(m)], lo[size_t(m) + 1]);
  }
  size_boundaries(lo);
  box_.reset(slot_count());
  return mbs;
}

LossStats PipelineCopy::pass(const Batch& b, bool training, int M, uint64_t seed, float grad_scale) {
  const std::vector<MicroBatch> mbs = micro_batches(b, M);
  const int S = int(stages_.size());
  std::vector<LossStats> per(static_cast<size_t>(S));
  std::vector<StageTimes> times(static_cast<size_t>(S));
  std::vector<double> ran(static_cast<size_t>(S));
  auto t0 = std::chrono::steady_clock::now();
  std::vector<double> reduced(static_cast<size_t>(S));
  threads_->run_all([&](int s) {
    auto t = std::chrono::steady_clock::now();
    per[size_t(s)] = stages_[size_t(s)]->run(mbs, training, grad_scale, seed, bounds_, box_, microbatches_, times[size_t(s)]);
    ran[size_t(s)] = since(t);
    if (!training) return;
    // The test hook's inf (copy 0's), before any sum or hold, as an fp16 overflow in backward would be.
    if (inject_ && rank_ == 0 && s == poison_stage()) poison(s);
    Tensor g = stages_[size_t(s)]->params().trainable_grads();
    // train.accumulate: an earlier micro-batch's gradients are held, not reduced; the last's get
    // the held sum before their sum over the copies.
    if (hold_) return held_grads_[size_t(s)]->hold(g, hold_first_);
    if (add_) held_grads_[size_t(s)]->add_into(g);
    if (stage_comms_.empty()) return;
    // Hybrid: this stage's gradients are final; their sum over the copies starts now, while the
    // stages before it are still in backward (the last stage finishes first).
    const auto r0 = std::chrono::steady_clock::now();
    stage_comms_[size_t(s)]->all_reduce_sum(g);
    reduced[size_t(s)] = since(r0);
  });
  if (training) {
    times_.schedule = since(t0);
    times_.allreduce = *std::max_element(reduced.begin(), reduced.end());
    bubble_.wall += times_.schedule;
    for (int s = 0; s < S; ++s) {
      StageTime& st = times_.stages[size_t(s)];
      st.waited = times[size_t(s)].waited;
      st.busy = ran[size_t(s)] - st.waited;
      st.forward = std::min(times[size_t(s)].forward, st.busy);
      bubble_.busy += st.busy;
    }
    ++bubble_.steps;
  }
  LossStats total;
  for (const LossStats& s : per) total += s;
  return total;
}

void PipelineCopy::size_boundaries(const std::vector<int64_t>& lo) {
  const size_t M = lo.size() - 1;
  auto want = [&](const Boundary& bd, size_t m) {
    return stages_[size_t(bd.from)]->graph().nodes()[size_t(bd.node)].shape.with_batch(lo[m + 1] - lo[m]);
  };
  auto holds = [](const Tensor& mem, const Shape& w) { return mem.defined() && mem.numel() >= w.numel(); };
  bool same = true, fits = true;
  for (Boundary& bd : bounds_) {
    for (auto* v : {&bd.fwd, &bd.bwd, &bd.fwd_mem, &bd.bwd_mem}) v->resize(size_t(microbatches_));
    if (bd.no_grad.size() != size_t(microbatches_)) bd.no_grad.assign(size_t(microbatches_), 0);  // kept: recordings hold its address
    for (size_t m = 0; m < M; ++m) {
      const Shape w = want(bd, m);
      same = same && bd.fwd[m].shape() == w && bd.bwd[m].shape() == w;
      fits = fits && holds(bd.fwd_mem[m], w) && holds(bd.bwd_mem[m], w);
    }
  }
  if (same) return;
  if (!fits) {
    ++generation_;  // recordings that copy into these buffers are made again
    // Each buffer in the memory of the stage that reads it (host memory between a CPU and a GPU
    // stage), made on that stage's thread. No pass is running, and every queue is drained first (an
    // update may still be queued): a block let go here and handed out again as a buffer another
    // stage's queue writes must be idle.
    threads_->run_all([&](int s) {
      OpContext& ctx = stages_[size_t(s)]->context();
      ctx.drain();
      for (Boundary& bd : bounds_)
        for (size_t m = 0; m < M; ++m) {
          const Shape flat{want(bd, m).numel()};
          if (bd.to == s && !holds(bd.fwd_mem[m], flat)) bd.fwd_mem[m] = bd.staged ? Tensor::empty(flat) : ctx.empty(flat);
          if (bd.from == s && !holds(bd.bwd_mem[m], flat)) bd.bwd_mem[m] = bd.staged ? Tensor::empty(flat) : ctx.empty(flat);
        }
    });
  }
  // The same addresses in every shape: a recording made for one batch size still copies into the
  // buffers another size's pass uses.
  for (Boundary& bd : bounds_)
    for (size_t m = 0; m < M; ++m) {
      const Shape w = want(bd, m);
      bd.fwd[m] = bd.fwd_mem[m].slice(0, w.numel()).reshape(w);
      bd.bwd[m] = bd.bwd_mem[m].slice(0, w.numel()).reshape(w);
    }
}

void PipelineCopy::sum_shared_gradients() {
  if (tied_.empty()) return;
  // Each copy's gradient to the host (on its stage's thread), summed in stage order, and back.
  std::vector<std::vector<std::vector<float>>> host(tied_.size());
  for (size_t t = 0; t < tied_.size(); ++t) host[t].resize(tied_[t].size());
  auto each_copy = [&](int s, const std::function<void(size_t t, size_t c, Tensor g)>& f) {
    for (size_t t = 0; t < tied_.size(); ++t)
      for (size_t c = 0; c < tied_[t].size(); ++c)
        if (tied_[t][c].first == s) f(t, c, stages_[size_t(s)]->params().grad_view(tied_[t][c].second));
  };
  threads_->run_all([&](int s) {
    OpContext& ctx = stages_[size_t(s)]->context();
    each_copy(s, [&](size_t t, size_t c, Tensor g) {
      host[t][c].resize(size_t(g.numel()));
      ctx.copy_to_host(host[t][c].data(), g.data(), g.bytes());
    });
    ctx.synchronize();
  });
  for (auto& copies : host)
    for (size_t c = 1; c < copies.size(); ++c)
      for (size_t i = 0; i < copies[0].size(); ++i) copies[0][i] += copies[c][i];
  threads_->run_all([&](int s) {
    OpContext& ctx = stages_[size_t(s)]->context();
    each_copy(s, [&](size_t t, size_t, Tensor g) { ctx.copy_from_host(g.data(), host[t][0].data(), g.bytes()); });
    ctx.synchronize();
  });
}

LossStats PipelineCopy::compute_gradients(const Batch& b, uint64_t seed, float loss_scale) {
  const int64_t n = scored_labels(b);
  LossStats s = pass(b, true, microbatches_, seed, n > 0 ? loss_scale / float(n) : 0.0f);
  inject_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  sum_shared_gradients();  // synchronises the stages that hold copies
  times_.shared_sum = since(t0);
  return s;
}

void PipelineCopy::attach(int rank, std::vector<Communicator*> stage_comms, Communicator* ctl) {
  rank_ = rank;
  stage_comms_ = std::move(stage_comms);
  ctl_ = ctl;
  if (!sync_bn_) return;
  for (size_t st = 0; st < stages_.size(); ++st) {
    syncs_.push_back(std::make_unique<CommStats>(*stage_comms_[st]));
    stages_[st]->set_sync(syncs_.back().get());
  }
}

void PipelineCopy::broadcast_parameters() {
  if (stage_comms_.empty()) return;
  threads_->run_all([&](int st) { stage_comms_[size_t(st)]->broadcast(stages_[size_t(st)]->params().weights(), 0); });
}

int PipelineCopy::poison_stage() const {
  for (size_t st = 0; st < stages_.size(); ++st)
    if (stages_[st]->params().trainable_grads().numel() > 0) return int(st);
  return -1;
}

void PipelineCopy::poison(int st) {
  Tensor g = stages_[size_t(st)]->params().trainable_grads();
  const float inf = std::numeric_limits<float>::infinity();
  stages_[size_t(st)]->context().copy_from_host(g.data(), &inf, sizeof(float));
  stages_[size_t(st)]->context().synchronize();
}

void PipelineCopy::start_average() {
  // train.ema: each stage's average starts from the weights training starts with.
  if (WeightAverage* a = stages_[0]->average(); a && !a->started())
    threads_->run_all([&](int st) { stages_[size_t(st)]->average()->start(); });
}

// Held micro-batches: each stage's gradients go into its held sum after its part of the schedule;
// the last of several adds each stage's sum in before that stage's sum over the copies (pass()).
LossStats PipelineCopy::forward_backward(const Batch& b, uint64_t seed, float grad_scale, Grads g) {
  hold_ = g == Grads::Hold || g == Grads::HoldFirst;
  hold_first_ = g == Grads::HoldFirst;
  add_ = g == Grads::AddHeld;
  LossStats s;
  try {
    s = pass(b, true, microbatches_, seed, grad_scale);
  } catch (...) {
    hold_ = add_ = false;
    throw;
  }
  inject_ = false;
  if (hold_) {  // no update in this part of the step
    times_.shared_sum = times_.optimizer = 0;
    for (StageTime& t : times_.stages) t.optimizer = 0;
  }
  hold_ = add_ = false;
  return s;
}

// A shared layer's copies summed over their devices, then the update on every stage's thread (a
// stage's optimizer time is its part of it, the finite check and its part of the norm included).
void PipelineCopy::reduce_and_update(float lr) {
  if (!stage_comms_.empty()) ++reduced_steps_;  // summed over the copies in pass()
  const auto t1 = std::chrono::steady_clock::now();
  sum_shared_gradients();  // synchronises the stages that hold copies
  times_.shared_sum = since(t1);
  mark_phase(rank(), Phase::Optimizer);
  const auto t0 = std::chrono::steady_clock::now();
  for (StageTime& t : times_.stages) t.optimizer = 0;
  update_.apply(update_parts_, [&](const std::function<void(int)>& fn) {
    threads_->run_all([&](int st) {
      const auto t = std::chrono::steady_clock::now();
      fn(st);
      if (timing_) stages_[size_t(st)]->context().synchronize();
      times_.stages[size_t(st)].optimizer += since(t);
    });
  }, lr);
  times_.optimizer = since(t0);
}

// Hybrid: copy 0's batch-norm statistics to every copy, stage by stage; then every stage's
// moving average (a hybrid's after copy 0's statistics reached every copy: the same average).
void PipelineCopy::after_update() {
  if (ctl_) {
    mark_phase(rank_, Phase::StepEnd);
    threads_->run_all([&](int st) {
      Tensor frozen = stages_[size_t(st)]->params().frozen_weights();
      if (frozen.numel() > 0) stage_comms_[size_t(st)]->broadcast(frozen, 0);
    });
  }
  if (stages_[0]->average())
    threads_->run_all([&](int st) { stages_[size_t(st)]->average()->update(stages_[size_t(st)]->optimizer().steps()); });
}

StepBreakdown PipelineCopy::step_parts() const {
  StepBreakdown p;
  p.split = false;
  p.forward_backward_ms = 1e3 * times_.schedule;
  p.optimizer_ms = 1e3 * times_.optimizer;
  p.allreduce_ms = 1e3 * (times_.shared_sum + times_.allreduce);
  p.exposed_allreduce_ms = 1e3 * times_.shared_sum;  // after the schedule; hybrid's sums overlap it
  for (size_t s = 0; s < stages_.size(); ++s) {
    const StageTime& t = times_.stages[s];
    p.stages.push_back({stages_[s]->context().device().str(), 1e3 * t.busy, 1e3 * t.waited, 1e3 * t.optimizer, 1e3 * t.forward});
  }
  return p;
}

void PipelineCopy::settle() {
  threads_->run_all([&](int st) { stages_[size_t(st)]->context().drain(); });
  if (ctl_) ctl_->barrier();
}

bool PipelineCopy::on_gpu() const {
  for (const auto& st : stages_)
    if (!st->context().device().is_cpu()) return true;
  return false;
}

StepStats PipelineCopy::eval_batch(const Batch& b, std::vector<int32_t>* predicted) {
  if (predicted) throw std::logic_error("device-parallel evaluation does not report predictions");
  return pass(b, false, 1, 0);
}

}  // namespace trainer
