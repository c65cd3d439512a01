// Graph construction (layers, shapes, parameters) and the layer-wise forward/backward passes.
#include "core/graph/graph.h"

#include <fmt/format.h>

#include <chrono>
#include <map>

#include "core/ops/elementwise.h"

namespace trainer {

Graph::Graph(const ModelSpec& spec) : input_shape_(spec.input) {
  std::map<std::string, int> index;
  std::vector<ParamEntry> entries;
  for (const LayerDef& def : spec.layers) {
    const LayerInfo* info = find_layer(def.type);
    cfg::MapReader reader(def.node, fmt::format("{} layer '{}'", def.type, def.name));
    reader.allow({"name", "type", "inputs"});
    GraphNode n;
    n.layer = info->make(reader);
    reader.finish();
    n.layer->set_identity(def.name, def.type, def.node);

    std::vector<Shape> in_shapes;
    for (const std::string& in : def.inputs) {
      if (in == spec.input_name) {
        n.inputs.push_back(-1);
        in_shapes.push_back(input_shape_);
      } else {
        int j = index.at(in);
        n.inputs.push_back(j);
        nodes_[size_t(j)].consumers++;
        in_shapes.push_back(nodes_[size_t(j)].shape);
      }
    }
    int k = int(in_shapes.size());
    if (k < n.layer->min_inputs() || (n.layer->max_inputs() >= 0 && k > n.layer->max_inputs())) {
      std::string want = n.layer->max_inputs() < 0 ? fmt::format("at least {}", n.layer->min_inputs())
                         : n.layer->min_inputs() == n.layer->max_inputs() ? fmt::format("{}", n.layer->min_inputs())
                         : fmt::format("{} to {}", n.layer->min_inputs(), n.layer->max_inputs());
      def.node.fail(fmt::format("{} layer '{}' takes {} input(s), got {}", def.type, def.name, want, k));
    }
    n.shape = n.layer->infer(in_shapes);
    // Element counts must stay far from int64 overflow (a config can ask for absurd sizes).
    auto too_big = [](const Shape& sh) {
      int64_t c = 1;
      for (int64_t d : sh.dims())
        if (d > 0 && __builtin_mul_overflow(c, d, &c)) return true;
      return c > (int64_t(1) << 40);
    };
    if (too_big(n.shape))
      def.node.fail(fmt::format("{} layer '{}' would produce an output of more than 2^40 values per sample", def.type, def.name));
    for (const ParamSpec& p : n.layer->params())
      if (too_big(p.shape))
        def.node.fail(fmt::format("{} layer '{}' would have a parameter of more than 2^40 values", def.type, def.name));
    for (int64_t d : n.shape.dims())
      if (d <= 0)
        def.node.fail(fmt::format("{} layer '{}' would produce an empty output ({}) from input {}", def.type, def.name,
                                  n.shape.str(), in_shapes[0].str()));
    for (const ParamSpec& p : n.layer->params()) {
      n.params.push_back(entries.size());
      entries.push_back({def.name + "/" + p.name, p, 0});
    }
    index[def.name] = int(nodes_.size());
    nodes_.push_back(std::move(n));
  }
  output_ = index.at(spec.output);
  store_.layout(std::move(entries));
  frontier_.assign(nodes_.size() + 1, 0);
  // layout() reorders entries (trainable first): map each node's parameters by name again.
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < store_.entries().size(); ++i) by_name[store_.entries()[i].name] = i;
  for (GraphNode& n : nodes_)
    for (size_t p = 0; p < n.params.size(); ++p)
      n.params[p] = by_name.at(n.layer->name() + "/" + n.layer->params()[p].name);
  frontier_[nodes_.size()] = store_.trainable_floats();
  for (size_t i = nodes_.size(); i-- > 0;) {
    frontier_[i] = frontier_[i + 1];
    for (size_t p : nodes_[i].params)
      if (store_.entries()[p].spec.trainable) frontier_[i] = std::min(frontier_[i], store_.entries()[p].offset);
  }
}

int Graph::node_index(const std::string& name) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].layer->name() == name) return int(i);
  return -1;
}

int64_t Graph::flops_per_sample() const {
  int64_t f = 0;
  for (const GraphNode& n : nodes_) f += n.layer->flops();
  return f;
}

void Graph::bind(OpContext& ctx, uint64_t seed) {
  ctx_ = &ctx;
  store_.allocate(ctx, seed);
  for (GraphNode& n : nodes_) {
    std::vector<Tensor> w, g;
    for (size_t p : n.params) {
      w.push_back(store_.weight_view(p));
      if (store_.entries()[p].spec.trainable) g.push_back(store_.grad_view(p));
    }
    n.layer->bind(ctx, std::move(w), std::move(g));
  }
  elementwise_ = make_kernel<ElementwiseKernel>(ctx, {});
  batch_ = -1;
}

void Graph::ensure_buffers(int64_t batch) {
  if (batch == batch_) return;
  acts_.assign(nodes_.size(), Tensor());
  grads_.assign(nodes_.size(), Tensor());
  int64_t biggest = input_shape_.numel();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    acts_[i] = ctx_->empty(nodes_[i].shape.with_batch(batch));
    grads_[i] = ctx_->empty(nodes_[i].shape.with_batch(batch));
    biggest = std::max(biggest, nodes_[i].shape.numel());
  }
  scratch_ = ctx_->empty(Shape{biggest * batch});
  grad_written_.assign(nodes_.size(), false);
  batch_ = batch;
}

void Graph::set_step_seed(uint64_t seed) {
  for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i].layer->set_step_seed(seed * 1000003ull + i);
}

void Graph::set_profiling(bool on) {
  if (on && !profiling_) times_.assign(nodes_.size(), LayerTime{});  // a fresh count; kept after
  profiling_ = on;
}

namespace {
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

void Graph::forward(const Tensor& x, bool training, int until) {
  if (!ctx_) throw std::logic_error("Graph::forward before bind");
  if (x.shape().without_batch() != input_shape_)
    throw std::invalid_argument(fmt::format("input batch has samples of shape {}, the model expects {}",
                                            x.shape().without_batch().str(), input_shape_.str()));
  ensure_buffers(x.dim(0));
  input_ = &x;
  if (until < 0) until = output_;
  std::vector<const Tensor*> in;
  for (int i = 0; i <= until; ++i) {
    GraphNode& n = nodes_[size_t(i)];
    in.clear();
    for (int j : n.inputs) in.push_back(j < 0 ? input_ : &acts_[size_t(j)]);
    ScopeTimer t(profiling_, *ctx_, profiling_ ? &times_[size_t(i)].forward : nullptr);
    n.layer->forward(in, acts_[size_t(i)], training);
  }
}

void Graph::zero_param_grads(const GraphNode& n) {
  for (size_t p : n.params)
    if (store_.entries()[p].spec.trainable) {
      Tensor g = store_.grad_view(p);
      ctx_->fill_zero(g.data(), g.bytes());
    }
}

void Graph::backward(const Tensor& dy_from, int from) {
  std::fill(grad_written_.begin(), grad_written_.end(), false);
  for (size_t i = size_t(from) + 1; i < nodes_.size(); ++i) zero_param_grads(nodes_[i]);
  if (hook_) hook_(frontier_[size_t(from) + 1]);
  std::vector<const Tensor*> in;
  std::vector<Tensor> dx_store;
  std::vector<Tensor*> dx;
  std::vector<int> accumulate_into;
  for (int i = from; i >= 0; --i) {
    GraphNode& n = nodes_[size_t(i)];
    const Tensor* dy = i == from ? &dy_from : &grads_[size_t(i)];
    if (i != from && !grad_written_[size_t(i)]) {  // nothing downstream reached this node
      zero_param_grads(n);
      if (hook_) hook_(frontier_[size_t(i)]);
      continue;
    }
    in.clear();
    dx_store.assign(n.inputs.size(), Tensor());
    accumulate_into.assign(n.inputs.size(), -1);
    size_t scratch_used = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int j = n.inputs[k];
      in.push_back(j < 0 ? input_ : &acts_[size_t(j)]);
      if (j < 0) {  // no gradient for the model input: an undefined tensor that still has its shape
        dx_store[k] = Tensor::view(nullptr, input_->shape(), DType::F32, input_->device());
        continue;
      }
      Tensor& g = grads_[size_t(j)];
      bool taken = grad_written_[size_t(j)];
      for (size_t q = 0; q < k; ++q) taken |= n.inputs[q] == j;
      if (!taken) {
        dx_store[k] = g;
        grad_written_[size_t(j)] = true;
      } else {  // a second contribution: compute into scratch, then add
        int64_t need = g.numel();
        if (scratch_used + size_t(need) > size_t(scratch_.numel())) {
          dx_store[k] = ctx_->empty(g.shape());
        } else {
          dx_store[k] = Tensor::view(scratch_.f32() + scratch_used, g.shape(), DType::F32, g.device());
          scratch_used += size_t(need);
        }
        accumulate_into[k] = j;
      }
    }
    dx.clear();
    for (Tensor& t : dx_store) dx.push_back(&t);
    ScopeTimer t(profiling_, *ctx_, profiling_ ? &times_[size_t(i)].backward : nullptr);
    n.layer->backward(in, acts_[size_t(i)], *dy, dx);
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (accumulate_into[k] >= 0) elementwise_->accumulate(dx_store[k], grads_[size_t(accumulate_into[k])]);
    if (hook_ && frontier_[size_t(i)] < frontier_[size_t(i) + 1]) hook_(frontier_[size_t(i)]);
  }
  if (hook_) hook_(0);
}

}  // namespace trainer
