// A stage's graphs, buffers and its part of the GPipe schedule.
#include "core/runtime/device_parallel/stage.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>

namespace trainer {

StageRuntime::StageRuntime(const TraineeSpec& t, const Stage& st, Device device, int threads, int microbatches,
                           const std::string& logits)
    : stage_(st) {
  ctx_ = make_context(device, t.context_for(threads));
  for (int m = 0; m < microbatches; ++m) {
    if (m == 0)
      graphs_.push_back(std::make_unique<Executor>(std::make_shared<const Graph>(st.spec), *ctx_, t.seed));
    else
      graphs_.push_back(std::make_unique<Executor>(*ctx_, *graphs_[0]));
    for (size_t k = 0; k < st.model_inputs.size(); ++k)
      if (st.model_inputs[k] < 0) graphs_[size_t(m)]->set_input_grad(int(k), true);
  }
  Executor& g = *graphs_[0];
  optimizer_ = make_optimizer(t.optimizer);
  bind_optimizer(*optimizer_, *ctx_, g.params());
  if (t.average.enabled()) average_ = std::make_unique<WeightAverage>(*ctx_, g.params().weights(), t.average);
  state_ = std::make_unique<StoreState>(*ctx_, g.params(), *optimizer_, average_.get());
  elementwise_ = make_kernel<ElementwiseKernel>(*ctx_, {});
  logits_ = g.node_index(logits);
  if (logits_ >= 0) {
    loss_ = make_loss(t.loss, *ctx_, t.loss_options);
    for (auto& gm : graphs_) {
      gm->keep_f32(logits_);  // the loss reads and writes f32
      gm->set_last(logits_);  // the output softmax is the loss's: its node neither runs nor has buffers
    }
  }
  const size_t n = g.nodes().size(), inputs = st.model_inputs.size();
  reads_.assign(n, {});
  last_use_.assign(n, {});
  sends_.assign(n, {});
  incoming_.assign(inputs, -1);
  dev_in_.assign(inputs, std::vector<Tensor>(size_t(microbatches)));
  dlogits_.assign(size_t(microbatches), Tensor());
  dev_labels_.assign(size_t(microbatches), Tensor());
  for (size_t k = 0; k < inputs; ++k) {
    if (st.model_inputs[k] >= 0) continue;
    int first = -1;
    for (size_t i = 0; i < n; ++i)
      for (int j : g.nodes()[i].inputs)
        if (is_model_input(j) && size_t(model_input_index(j)) == k) {
          if (reads_[i].empty() || reads_[i].back() != int(k)) reads_[i].push_back(int(k));
          if (first < 0) first = int(i);
        }
    // Backward goes from the last node down: the input's gradient is final after its first reader.
    if (first >= 0) last_use_[size_t(first)].push_back(int(k));
  }
}

void StageRuntime::connect(const std::vector<Boundary>& all, int self) {
  dev_grad_.assign(all.size() * graphs_.size(), Tensor());
  for (size_t b = 0; b < all.size(); ++b) {
    if (all[b].from == self) {
      sends_[size_t(all[b].node)].push_back(int(b));
      for (auto& g : graphs_) g->keep_f32(all[b].node);  // boundaries carry f32 (Boundary's buffers)
    }
    if (all[b].to == self) incoming_[size_t(all[b].input)] = int(b);
  }
}

Tensor& StageRuntime::sized(Tensor& t, const Shape& s, DType d) {
  if (!t.defined() || t.shape() != s || t.dtype() != d) t = ctx_->empty(s, d);
  return t;
}

LossStats StageRuntime::run(const std::vector<MicroBatch>& mbs, bool training, float grad_scale, uint64_t seed,
                            std::vector<Boundary>& bounds, Mailbox& box, int max_microbatches, StageTimes& times) {
  LossStats total;
  const int M = int(mbs.size());
  const auto t0 = std::chrono::steady_clock::now();
  const double waited0 = times.waited;
  for (int m = 0; m < M; ++m) forward(m, mbs[size_t(m)], training, grad_scale, seed, bounds, box, max_microbatches, times, total);
  // Host time: on a GPU, forward work still queued is counted in backward's share.
  times.forward = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - (times.waited - waited0);
  if (!training) {
    ctx_->synchronize();  // the next pass's copies into the boundary buffers come after this one's reads
    return total;
  }
  backward_microbatches(M, [&](int m) { backward(m, bounds, box, max_microbatches, times); });
  ctx_->synchronize();
  return total;
}

void StageRuntime::backward_microbatches(int M, const std::function<void(int)>& backward) {
  const Tensor grads = params().trainable_grads();
  for (int m = M - 1; m >= 0; --m) {
    backward(m);
    if (M == 1 || grads.numel() == 0) continue;
    if (m == M - 1) {
      sized(acc_, grads.shape());
      ctx_->copy(acc_.data(), grads.data(), grads.bytes());
    } else {
      elementwise_->accumulate(grads, acc_);
    }
  }
  if (M > 1 && grads.numel() > 0) ctx_->copy(grads.data(), acc_.data(), grads.bytes());
}

void StageRuntime::send(Tensor& dst, const Tensor& src, bool staged, size_t mark) {
  if (staged && !ctx_->device().is_cpu()) {
    ctx_->copy_to_host(dst.data(), src.data(), dst.bytes());
    ctx_->synchronize();
    return;
  }
  ctx_->copy(dst.data(), src.data(), dst.bytes());  // a GPU's peer copy, queued; a CPU's memcpy
  if (!staged) ctx_->mark_queue_at(mark);
}

const Tensor& StageRuntime::receive(const Boundary& bd, const Tensor& buf, OpContext& sender, Tensor& local, size_t mark) {
  if (!bd.staged) {
    ctx_->wait_for_mark_at(sender, mark);  // the sender's copy is behind its mark for this hand-off
    return buf;
  }
  if (ctx_->device().is_cpu()) return buf;  // host memory, written before it was posted
  sized(local, buf.shape());
  ctx_->copy_from_host(local.data(), buf.data(), buf.bytes());
  return local;
}

void StageRuntime::forward(int m, const MicroBatch& mb, bool training, float grad_scale, uint64_t seed,
                           std::vector<Boundary>& bounds, Mailbox& box, int M, StageTimes& times, LossStats& total) {
  Executor& g = *graphs_[size_t(m)];
  const bool cpu = ctx_->device().is_cpu();
  const size_t inputs = stage_.model_inputs.size();
  std::vector<const Tensor*> in(inputs);
  for (size_t k = 0; k < inputs; ++k) {
    Tensor& local = dev_in_[k][size_t(m)];
    if (incoming_[k] >= 0) {  // a boundary's buffer, or (staged, on a GPU) its copy here
      const Boundary& bd = bounds[size_t(incoming_[k])];
      in[k] = bd.staged && !cpu ? &sized(local, bd.fwd[size_t(m)].shape()) : &bd.fwd[size_t(m)];
    } else if (cpu) {
      in[k] = &mb.inputs[size_t(stage_.model_inputs[k])];
    } else {
      const Tensor& host = mb.inputs[size_t(stage_.model_inputs[k])];
      in[k] = &sized(local, host.shape());
      ctx_->copy_from_host(local.data(), host.data(), host.bytes());
    }
  }
  GraphHooks h;
  h.before_forward = [&](int i) {
    for (int k : reads_[size_t(i)]) {
      const Boundary& bd = bounds[size_t(incoming_[size_t(k)])];
      const size_t at = handoff_slot(size_t(incoming_[size_t(k)]), m, false, M);
      times.waited += box.wait(at);
      receive(bd, bd.fwd[size_t(m)], *bd.from_ctx, dev_in_[size_t(k)][size_t(m)], at);
    }
  };
  h.after_forward = [&](int i) {
    for (int b : sends_[size_t(i)]) {
      const size_t at = handoff_slot(size_t(b), m, false, M);
      send(bounds[size_t(b)].fwd[size_t(m)], g.output(i), bounds[size_t(b)].staged, at);
      box.post(at);
    }
  };
  HookScope scope(g, std::move(h));
  g.set_step_seed(seed * 0x9E3779B97F4A7C15ull + uint64_t(m));
  g.forward(in, training, g.last_node());
  if (loss_) {
    Tensor labels = mb.labels;
    if (!cpu) {
      labels = sized(dev_labels_[size_t(m)], mb.labels.shape(), DType::I32);
      ctx_->copy_from_host(labels.data(), mb.labels.data(), mb.labels.bytes());
    }
    Tensor none;
    Tensor& dl = training ? sized(dlogits_[size_t(m)], g.output(logits_).shape()) : none;
    total += loss_->compute(g.output(logits_), labels, dl, grad_scale);
  }
}

void StageRuntime::backward(int m, std::vector<Boundary>& bounds, Mailbox& box, int M, StageTimes& times) {
  Executor& g = *graphs_[size_t(m)];
  const bool cpu = ctx_->device().is_cpu();
  GraphHooks h;
  h.before_backward = [&](int i) {
    if (i == logits_) g.add_grad(i, dlogits_[size_t(m)]);
    for (int b : sends_[size_t(i)]) {
      const size_t at = handoff_slot(size_t(b), m, true, M);
      times.waited += box.wait(at);
      Boundary& bd = bounds[size_t(b)];
      Tensor& local = dev_grad_[size_t(b) * graphs_.size() + size_t(m)];
      if (std::atomic_ref<char>(bd.no_grad[size_t(m)]).load(std::memory_order_relaxed)) {  // zeros, in this stage's memory
        Tensor& z = bd.staged && !cpu ? sized(local, bd.bwd[size_t(m)].shape()) : bd.bwd[size_t(m)];
        ctx_->fill_zero(z.data(), z.bytes());
        g.add_grad(i, z);
      } else {
        g.add_grad(i, receive(bd, bd.bwd[size_t(m)], *bd.to_ctx, local, at));
      }
    }
  };
  h.after_backward = [&](int i) {
    for (int k : last_use_[size_t(i)]) {
      const size_t b = size_t(incoming_[size_t(k)]);
      Boundary& bd = bounds[b];
      // (Atomic: a stage recording its program reads it while this stage may run the step.)
      const char none = g.input_grad_written(k) ? 0 : 1;
      std::atomic_ref<char>(bd.no_grad[size_t(m)]).store(none, std::memory_order_relaxed);
      const size_t at = handoff_slot(b, m, true, M);
      if (!none) send(bd.bwd[size_t(m)], g.input_grad(k), bd.staged, at);
      box.post(at);
    }
  };
  HookScope scope(g, std::move(h));
  g.backward_all();
}

void StageRuntime::set_sync(StatsSync* s) {
  for (auto& g : graphs_)
    for (size_t i = 0; i < g->nodes().size(); ++i) g->layer(int(i)).set_sync(s);
}

}  // namespace trainer
