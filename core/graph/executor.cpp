// The executor: cloned layers bound to a context, the arena and its views, forward and backward.
#include "core/graph/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace trainer {

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Adds the wall time of its scope (after synchronising the context) to `*acc`, when enabled.
class ScopeTimer {
 public:
  ScopeTimer(bool on, OpContext& ctx, double* acc) : on_(on), ctx_(ctx), acc_(acc) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~ScopeTimer() {
    if (!on_) return;
    ctx_.synchronize();
    *acc_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  bool on_;
  OpContext& ctx_;
  double* acc_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

Executor::Executor(std::shared_ptr<const Graph> graph, OpContext& ctx, uint64_t seed)
    : graph_(std::move(graph)), ctx_(&ctx), store_(std::make_shared<ParamStore>(graph_->params(), ctx, seed)) {
  bind_layers();
}

Executor::Executor(OpContext& ctx, Executor& owner) : graph_(owner.graph_), ctx_(&ctx), store_(owner.store_) {
  bind_layers();
}

void Executor::bind_layers() {
  const auto& nodes = graph_->nodes();
  layers_.clear();
  shadow_.assign(nodes.size(), {});
  for (size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    std::vector<Tensor> w, g;
    for (size_t k = 0; k < n.params.size(); ++k) {
      const size_t p = n.params[k];
      const ParamEntry& e = store_->entries()[p];
      w.push_back(store_->weight_view(p));
      if (!e.spec.trainable) continue;
      if (n.shares < 0 && !n.tied[k]) {
        g.push_back(store_->grad_view(p));
      } else {  // its own gradient buffer, added into the owner's after the owner's backward
        shadow_[i].push_back(ctx_->zeros(e.spec.shape));
        g.push_back(shadow_[i].back());
      }
    }
    layers_.push_back(n.layer->clone());
    layers_.back()->set_scratch_pool(&transients_);
    layers_.back()->bind(*ctx_, std::move(w), std::move(g));
  }
  elementwise_ = make_kernel<ElementwiseKernel>(*ctx_, {});
  keep_f32_.assign(nodes.size(), false);
  keep_f32_[size_t(graph_->output_node())] = true;  // the engine reads it
  input_grad_on_.assign(graph_->input_shapes().size(), false);
  input_grad_written_.assign(graph_->input_shapes().size(), false);
  replan_ = true;
}

void Executor::keep_f32(int node) {
  keep_f32_.at(size_t(node)) = true;
  replan_ = true;
}

void Executor::set_last(int node) {
  if (node < 0 || size_t(node) >= graph_->nodes().size())
    throw std::out_of_range(fmt::format("node {} is not in the graph", node));
  last_ = node;
  replan_ = true;
}

void Executor::set_channel_slices(bool on) {
  channel_slices_ = on;
  replan_ = true;
}

void Executor::set_input_grad(int k, bool on) {
  input_grad_on_.at(size_t(k)) = on;
  replan_ = true;
}

Tensor Executor::view(const Region& r, const Shape& s, DType t) const {
  if (!r.defined()) return Tensor();
  void* at = static_cast<char*>(arena_.data()) + r.offset;
  if (r.row_stride) return Tensor::strided_view(at, s, t, arena_.device(), r.row_stride);
  return Tensor::view(at, s, t, arena_.device());
}

// The plan for this batch and these input types (kept while they stay: every step of one batch
// size allocates nothing), the arena grown to hold it, and the views of its buffers.
void Executor::ensure_plan(int64_t batch) {
  bool same = !replan_ && batch == plan_.batch && inputs_.size() == plan_.input_dtypes.size();
  for (size_t k = 0; same && k < inputs_.size(); ++k) same = inputs_[k]->dtype() == plan_.input_dtypes[k];
  if (same) return;
  const auto& nodes = graph_->nodes();
  const size_t n = nodes.size();
  ExecutionInputs in;
  in.batch = batch;
  in.low = low_dtype(ctx_->precision());
  for (const Tensor* t : inputs_) in.input_dtypes.push_back(t->dtype());
  in.keep_f32 = keep_f32_;
  in.last = last_;
  in.input_grads = input_grad_on_;
  in.can_fuse = [this](int producer, ActKind k) { return layers_[size_t(producer)]->can_fuse_activation(k); };
  if (grad_pass_) in.can_pass_grad = [this](int node, int k) { return layers_[size_t(node)]->passes_grad_through(k); };
  if (channel_slices_) {
    in.can_slice = [this](int producer) { return layers_[size_t(producer)]->writes_channel_slice(); };
    in.can_join = [this](int node) { return layers_[size_t(node)]->joins_siblings(); };
  }
  plan_ = plan_execution(*graph_, in);
  replan_ = false;
  apply_fusion();
  if (int64_t(arena_.bytes()) < plan_.arena_bytes) arena_ = ctx_->empty(Shape{plan_.arena_bytes}, DType::U8);
  acts_.assign(n, Tensor());
  grads_.assign(n, Tensor());
  cast_.assign(n, Tensor());
  for (size_t i = 0; i < n; ++i) {
    const Shape s = nodes[i].shape.with_batch(batch);
    acts_[i] = view(plan_.act[i], s, plan_.dtypes[i]);
    grads_[i] = view(plan_.grad[i], s, plan_.dtypes[i]);
    if (plan_.cast[i].defined()) cast_[i] = view(plan_.cast[i], s, plan_.dtypes[i] == DType::F32 ? in.low : DType::F32);
  }
  const size_t inputs = graph_->input_shapes().size();
  input_cast_.assign(inputs, Tensor());
  input_grads_.assign(inputs, Tensor());
  for (size_t k = 0; k < inputs; ++k) {
    const Shape s = graph_->input_shapes()[k].with_batch(batch);
    const DType t = plan_.input_dtypes[k];
    if (plan_.input_cast[k].defined()) input_cast_[k] = view(plan_.input_cast[k], s, t == DType::F32 ? in.low : DType::F32);
    if (plan_.input_grad[k].defined()) input_grads_[k] = view(plan_.input_grad[k], s, is_float(t) ? t : DType::F32);
  }
  scratch_ = view(plan_.scratch, Shape{plan_.scratch.bytes}, DType::U8);
  grad_written_.assign(n, false);
  cast_done_.assign(n, false);
  input_cast_done_.assign(inputs, false);
  siblings_done_.assign(n, false);
}

// The plan's fusions on the layers: a producer applies its fused consumer's activation (the
// consumer does nothing), and a producer that no longer has one stops.
void Executor::apply_fusion() {
  const size_t n = layers_.size();
  for (size_t i = 0; i < n; ++i) layers_[i]->set_fused(plan_.fused_into[i] >= 0);
  for (size_t j = 0; j < n; ++j) layers_[j]->fuse_activation(plan_.applies[j]);
}

void Executor::set_step_seed(uint64_t seed) {
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->set_step_seed(node_seed(seed, i));
}

void Executor::set_step_scalars(const StepScalars* step) {
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->set_step_scalars(step, i);
}

void Executor::set_profiling(bool on) {
  if (on && !profiling_) times_.assign(layers_.size(), LayerTime{});  // a fresh count; kept after
  profiling_ = on;
}

// Node i's input j as node i computes: the producer's output, or its converted copy (made on the
// first read of a pass: a device-parallel hook may fill a model input just before its reader).
const Tensor& Executor::input_as(int i, int j) {
  const bool model = is_model_input(j);
  const size_t m = model ? size_t(model_input_index(j)) : size_t(j);
  const Tensor& src = model ? *inputs_[m] : acts_[m];
  if (!is_float(src.dtype()) || src.dtype() == plan_.dtypes[size_t(i)]) return src;
  const bool widens = dtype_size(src.dtype()) < dtype_size(plan_.dtypes[size_t(i)]);  // exactly: bf16, f16 -> f32
  if (typed_io_ && widens && layers_[size_t(i)]->reads_input_as(src.dtype())) return src;
  Tensor& cast = model ? input_cast_[m] : cast_[m];
  std::vector<bool>::reference done = model ? input_cast_done_[m] : cast_done_[m];
  if (!done) {
    elementwise_->convert(src, cast);
    done = true;
  }
  return cast;
}

void Executor::forward(const std::vector<const Tensor*>& inputs, bool training, int until) {
  const std::vector<Shape>& shapes = graph_->input_shapes();
  if (inputs.size() != shapes.size())
    throw std::invalid_argument(fmt::format("{} input tensors for a model of {} inputs", inputs.size(), shapes.size()));
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k]->shape().without_batch() != shapes[k] || inputs[k]->dim(0) != inputs[0]->dim(0))
      throw std::invalid_argument(fmt::format("input batch has samples of shape {}, the model expects {}",
                                              inputs[k]->shape().without_batch().str(), shapes[k].str()));
  inputs_ = inputs;
  ensure_plan(inputs[0]->dim(0));
  std::fill(cast_done_.begin(), cast_done_.end(), false);
  std::fill(input_cast_done_.begin(), input_cast_done_.end(), false);
  if (until < 0) until = last_ >= 0 ? last_ : graph_->output_node();
  if (last_ >= 0 && until > last_)
    throw std::logic_error(fmt::format("forward up to node {}, past the last node planned ({})", until, last_));
  std::vector<const Tensor*> in;
  for (int i = 0; i <= until; ++i) {
    const GraphNode& n = graph_->nodes()[size_t(i)];
    if (hooks_.before_forward) hooks_.before_forward(i);
    const int leader = plan_.sibling_leader[size_t(i)];
    if (leader >= 0 && leader != i && leader <= until) {  // done in its leader's forward, in this pass
      if (hooks_.after_forward) hooks_.after_forward(i);
      continue;
    }
    in.clear();
    for (int j : n.inputs) in.push_back(&input_as(i, j));
    {
      ScopeTimer t(profiling_, *ctx_, profiling_ ? &times_[size_t(i)].forward : nullptr);
      if (leader == i)
        forward_siblings(i, training);
      else
        layers_[size_t(i)]->forward(in, acts_[size_t(i)], training);
    }
    if (hooks_.after_forward) hooks_.after_forward(i);
  }
}

void Executor::zero_param_grads(int node) {
  const GraphNode& n = graph_->nodes()[size_t(node)];
  for (Tensor& g : shadow_[size_t(node)]) ctx_->fill_zero(g.data(), g.bytes());
  if (n.shares >= 0) return;
  for (size_t k = 0; k < n.params.size(); ++k)
    if (store_->entries()[n.params[k]].spec.trainable && !n.tied[k]) {
      Tensor g = store_->grad_view(n.params[k]);
      ctx_->fill_zero(g.data(), g.bytes());
    }
}

void Executor::finish_params(int node) {
  const GraphNode& n = graph_->nodes()[size_t(node)];
  for (int s : n.sharers) {
    size_t q = 0;
    for (size_t p : n.params)
      if (store_->entries()[p].spec.trainable) {
        Tensor g = store_->grad_view(p);
        elementwise_->accumulate(shadow_[size_t(s)][q++], g);
      }
  }
  // Tied uses (a later layer's, whose backward ran before this one's): their gradient of each of
  // this node's parameters added, in the order of the users.
  for (int u : n.tie_users) {
    const GraphNode& user = graph_->nodes()[size_t(u)];
    size_t q = 0;  // the user's shadows: its tied trainable parameters, in order
    for (size_t k = 0; k < user.params.size(); ++k) {
      const size_t p = user.params[k];
      if (!user.tied[k] || !store_->entries()[p].spec.trainable) continue;
      if (std::find(n.params.begin(), n.params.end(), p) != n.params.end()) {
        Tensor g = store_->grad_view(p);
        elementwise_->accumulate(shadow_[size_t(u)][q], g);
      }
      ++q;
    }
  }
}

void Executor::add_grad(int node, const Tensor& g) {
  Tensor& dst = grads_[size_t(node)];
  if (g.numel() != dst.numel()) throw std::logic_error("Executor::add_grad: shape mismatch");
  if (!grad_written_[size_t(node)]) {
    elementwise_->convert(g, dst);
    grad_written_[size_t(node)] = true;
  } else {
    elementwise_->accumulate(g, dst);
  }
}

// The members of the sibling group node i leads (ExecutionPlan::sibling_leader), in channel order:
// the writers of its concat's inputs.
std::vector<int> Executor::sibling_members(int i) const {
  std::vector<int> w;
  for (int k : graph_->nodes()[size_t(plan_.slice_of[size_t(i)])].inputs)
    w.push_back(plan_.in_place_of[size_t(k)] < 0 ? k : plan_.in_place_of[size_t(k)]);
  return w;
}

// A sibling group's forward at its leader i: every member's, in one pass writing the concat's rows
// (the members before i skipped theirs).
void Executor::forward_siblings(int i, bool training) {
  std::vector<Layer*> members;
  std::vector<const Tensor*> xs;
  for (int w : sibling_members(i)) {
    members.push_back(layers_[size_t(w)].get());
    xs.push_back(&input_as(w, graph_->nodes()[size_t(w)].inputs[0]));
  }
  layers_[size_t(i)]->forward_siblings(members, xs, acts_[size_t(plan_.slice_of[size_t(i)])], training);
}

// A sibling group's backward at its leader i, i's own input and input gradient given: the members'
// input gradients (each read by it alone) are written here, and the members' own backward is
// skipped. False, and nothing done, where a member's output gradient is not written yet or its
// input's is (a partial backward): the members then run one by one.
bool Executor::backward_siblings(int i, const Tensor& x, Tensor& dx) {
  const std::vector<int> ws = sibling_members(i);
  const auto& cat = graph_->nodes()[size_t(plan_.slice_of[size_t(i)])];
  std::vector<Layer*> members;
  std::vector<const Tensor*> xs;
  std::vector<Tensor*> dxs;
  for (size_t q = 0; q < ws.size(); ++q) {
    const int w = ws[q];
    members.push_back(layers_[size_t(w)].get());
    if (!grad_written_[size_t(cat.inputs[q])]) return false;  // its slice of the concat's gradient
    if (w == i) {
      xs.push_back(&x);
      dxs.push_back(&dx);
      continue;
    }
    const int j = graph_->nodes()[size_t(w)].inputs[0];
    if (grad_written_[size_t(j)]) return false;
    xs.push_back(&input_as(w, j));
    dxs.push_back(&grads_[size_t(j)]);
  }
  for (int w : ws)
    if (w != i) grad_written_[size_t(graph_->nodes()[size_t(w)].inputs[0])] = true;
  layers_[size_t(i)]->backward_siblings(members, xs, acts_[size_t(plan_.slice_of[size_t(i)])],
                                        grads_[size_t(plan_.slice_of[size_t(i)])], dxs);
  siblings_done_[size_t(i)] = true;
  return true;
}

void Executor::backward(const Tensor& dy_from, int from) {
  std::fill(grad_written_.begin(), grad_written_.end(), false);
  grad_written_[size_t(from)] = true;
  run_backward(from, &dy_from);
}

void Executor::backward_all() { run_backward(last_node(), nullptr); }

void Executor::run_backward(int from, const Tensor* dy_from) {
  if (!dy_from) std::fill(grad_written_.begin(), grad_written_.end(), false);
  std::fill(input_grad_written_.begin(), input_grad_written_.end(), false);
  for (size_t i = size_t(from) + 1; i < layers_.size(); ++i) zero_param_grads(int(i));
  if (hook_) hook_(graph_->frontier(size_t(from) + 1));
  std::vector<const Tensor*> in;
  std::vector<Tensor> dx_store;
  std::vector<Tensor*> dx;
  struct Apart {
    Tensor* into = nullptr;  // the gradient this input's part goes into
    bool add = false;        // added to it (else converted into it)
  };
  std::vector<Apart> apart;
  std::vector<bool> adds;  // per input: the layer adds its gradient into the one written first
  std::fill(siblings_done_.begin(), siblings_done_.end(), false);
  for (int i = from; i >= 0; --i) {
    const GraphNode& n = graph_->nodes()[size_t(i)];
    if (hooks_.before_backward) hooks_.before_backward(i);
    const Tensor* dy = (i == from && dy_from) ? dy_from : &grads_[size_t(i)];
    const int leader = plan_.sibling_leader[size_t(i)];
    if (leader >= 0 && leader != i && siblings_done_[size_t(leader)]) {  // done in its leader's backward
      if (hooks_.after_backward) hooks_.after_backward(i);
      if (hook_ && graph_->frontier(size_t(i)) < graph_->frontier(size_t(i) + 1)) hook_(graph_->frontier(size_t(i)));
      continue;
    }
    if (!grad_written_[size_t(i)]) {  // nothing downstream reached this node
      zero_param_grads(i);
      finish_params(i);
      if (hooks_.after_backward) hooks_.after_backward(i);
      if (hook_ && graph_->frontier(size_t(i)) < graph_->frontier(size_t(i) + 1)) hook_(graph_->frontier(size_t(i)));
      continue;
    }
    in.clear();
    dx_store.assign(n.inputs.size(), Tensor());
    apart.assign(n.inputs.size(), Apart{});
    adds.assign(n.inputs.size(), false);
    size_t scratch_used = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int j = n.inputs[k];
      bool model_input = is_model_input(j);
      size_t m = model_input ? size_t(model_input_index(j)) : size_t(j);
      in.push_back(&input_as(i, j));
      if (model_input && !input_grad_on_[m]) {  // no gradient wanted: an undefined tensor that still has its shape
        const DType t = in.back()->dtype();
        dx_store[k] = Tensor::view(nullptr, inputs_[m]->shape(), is_float(t) ? t : DType::F32, inputs_[m]->device());
        continue;
      }
      Tensor& g = model_input ? input_grads_[m] : grads_[m];
      std::vector<bool>::reference written = model_input ? input_grad_written_[m] : grad_written_[m];
      bool repeated = false;  // the node reads this tensor twice
      for (size_t q = 0; q < k; ++q) repeated |= n.inputs[q] == j;
      const bool taken = written || repeated;
      written = true;
      const bool typed = typed_io_ && layers_[size_t(i)]->writes_input_grad_as(int(k), g.dtype());
      if (!taken && (g.dtype() == plan_.dtypes[size_t(i)] || typed)) {
        dx_store[k] = g;
        continue;
      }
      // A second contribution the layer adds in place (Layer::can_add_input_grad).
      if (!repeated && g.dtype() == plan_.dtypes[size_t(i)] && layers_[size_t(i)]->can_add_input_grad(int(k))) {
        dx_store[k] = g;
        adds[k] = true;
        continue;
      }
      // A second contribution, or one of another type: computed apart in this node's type, then
      // added into g or (the first) converted into it.
      const size_t bytes = size_t(g.numel()) * dtype_size(plan_.dtypes[size_t(i)]);
      if (scratch_used + bytes > scratch_.bytes()) {  // the plan sized the scratch for the largest node
        throw std::logic_error(fmt::format("executor: node {}'s input gradients exceed the planned scratch", i));
      } else {
        dx_store[k] = Tensor::view(static_cast<char*>(scratch_.data()) + scratch_used, g.shape(), plan_.dtypes[size_t(i)], g.device());
        scratch_used += (bytes + 63) / 64 * 64;
      }
      apart[k] = {&g, taken};
    }
    dx.clear();
    for (Tensor& t : dx_store) dx.push_back(&t);
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (layers_[size_t(i)]->can_add_input_grad(int(k))) layers_[size_t(i)]->add_input_grad(int(k), adds[k]);
    {
      ScopeTimer t(profiling_, *ctx_, profiling_ ? &times_[size_t(i)].backward : nullptr);
      const bool joined =
          leader == i && !adds[0] && !apart[0].into && dy != dy_from && backward_siblings(i, *in[0], *dx[0]);
      if (!joined) layers_[size_t(i)]->backward(in, acts_[size_t(i)], *dy, dx);
    }
    {
      bool sums = false;  // profiling: timed only where there is something to add or convert
      if (profiling_) {
        sums = !n.sharers.empty();
        for (const Apart& a : apart) sums |= a.into != nullptr;
      }
      ScopeTimer t(sums, *ctx_, sums ? &times_[size_t(i)].sums : nullptr);
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (!apart[k].into) continue;
        if (apart[k].add) elementwise_->accumulate(dx_store[k], *apart[k].into);
        else elementwise_->convert(dx_store[k], *apart[k].into);
      }
      finish_params(i);
    }
    if (hooks_.after_backward) hooks_.after_backward(i);
    if (hook_ && graph_->frontier(size_t(i)) < graph_->frontier(size_t(i) + 1)) hook_(graph_->frontier(size_t(i)));
  }
  if (hook_) hook_(0);
}

}  // namespace trainer
